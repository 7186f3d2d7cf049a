"""Qwen2-VL's image preprocessing (pixel values and grid) with Pillow alone.

SGLang's gRPC servicer takes an image only as preprocessed pixel values (see
:mod:`turnout.multimodal.mm_inputs`), so the router does what Hugging Face's
``Qwen2VLImageProcessor`` does, step for step:

1. convert to RGB (transparency composited over white);
2. resize, bicubic, to the nearest size whose sides are multiples of ``patch_size x
   merge_size`` (28) with ``min_pixels <= width x height <= max_pixels`` (``smart_resize``);
3. rescale by 1/255 and normalise each channel with the CLIP mean and deviation;
4. cut into 14 x 14 patches ordered by 2 x 2 merge block, each patch flattened as
   (channel, time, row, column) with the single frame repeated ``temporal_patch_size`` times.

The result is ``float32[patches, 3 x 2 x 14 x 14]`` and the grid ``(1, rows, columns)``; the
image takes ``rows x columns / merge_size²`` placeholder tokens in the prompt.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from PIL import Image

__all__ = ["ProcessedImage", "Qwen2VLVision", "smart_resize"]

_CLIP_MEAN: Final = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD: Final = (0.26862954, 0.26130258, 0.27577711)


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """(height, width) rounded to multiples of ``factor`` within the pixel bounds, keeping the
    aspect ratio as well as those allow. ``ValueError`` past an aspect ratio of 200."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("the image's aspect ratio is above 200")
    rows = round(height / factor) * factor
    cols = round(width / factor) * factor
    if rows * cols > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        rows = max(factor, math.floor(height / beta / factor) * factor)
        cols = max(factor, math.floor(width / beta / factor) * factor)
    elif rows * cols < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        rows = math.ceil(height * beta / factor) * factor
        cols = math.ceil(width * beta / factor) * factor
    return rows, cols


@dataclass(frozen=True, slots=True)
class ProcessedImage:
    """One image ready for the worker."""

    #: Little-endian float32 pixel values, ``patches x patch_dim``.
    pixel_values: bytes
    patches: int
    patch_dim: int
    #: (time, rows, columns) in patches.
    grid_thw: tuple[int, int, int]
    #: Placeholder tokens the image takes in the prompt.
    tokens: int


def _triple(values: Any) -> tuple[float, float, float]:
    first, second, third = (float(v) for v in values)
    return first, second, third


def _rgb(image: Image.Image) -> Image.Image:
    if image.mode == "RGB":
        return image
    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


@dataclass(frozen=True, slots=True)
class Qwen2VLVision:
    """The preprocessing settings of one Qwen2-VL model (``preprocessor_config.json``)."""

    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280
    image_mean: tuple[float, float, float] = _CLIP_MEAN
    image_std: tuple[float, float, float] = _CLIP_STD
    rescale_factor: float = 1 / 255

    @classmethod
    def from_model_dir(cls, path: str | Path) -> Qwen2VLVision:
        """Settings from ``preprocessor_config.json`` (the defaults when it is absent)."""
        file = Path(path) / "preprocessor_config.json"
        data: dict[str, Any] = (
            json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
        )
        size = data.get("size") or {}
        defaults = cls()
        return cls(
            patch_size=int(data.get("patch_size", defaults.patch_size)),
            merge_size=int(data.get("merge_size", defaults.merge_size)),
            temporal_patch_size=int(data.get("temporal_patch_size", defaults.temporal_patch_size)),
            min_pixels=int(
                data.get("min_pixels") or size.get("shortest_edge") or defaults.min_pixels
            ),
            max_pixels=int(
                data.get("max_pixels") or size.get("longest_edge") or defaults.max_pixels
            ),
            image_mean=_triple(data.get("image_mean", defaults.image_mean)),
            image_std=_triple(data.get("image_std", defaults.image_std)),
            rescale_factor=float(data.get("rescale_factor", defaults.rescale_factor)),
        )

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(rows, columns) in pixels that an image of ``width`` x ``height`` is resized to;
        ``ValueError`` for an aspect ratio the model cannot take."""
        factor = self.patch_size * self.merge_size
        return smart_resize(height, width, factor, self.min_pixels, self.max_pixels)

    def image_tokens(self, width: int, height: int) -> int:
        """Placeholder tokens an image of this size takes, known from its size alone (before
        it is decoded); ``ValueError`` as :meth:`resized`."""
        rows, cols = self.resized(width, height)
        return (rows // self.patch_size) * (cols // self.patch_size) // self.merge_size**2

    def preprocess(self, image: Image.Image) -> ProcessedImage:
        """Pixel values and grid of one decoded image (blocking: run it in a thread)."""
        rows, cols = self.resized(*image.size)
        rgb = _rgb(image)
        resized = rgb.resize((cols, rows), Image.Resampling.BICUBIC)
        # x * rescale then (x - mean) / std, as one linear map per channel (Pillow's float path)
        stats = zip(resized.split(), self.image_mean, self.image_std, strict=True)
        channels = [
            band.convert("F").point(lambda x, s=self.rescale_factor / std, o=-mean / std: x * s + o)
            for band, mean, std in stats
        ]
        patch, merge, frames = self.patch_size, self.merge_size, self.temporal_patch_size
        grid_h, grid_w = rows // patch, cols // patch
        # A column of patches, one patch wide, holds each of its patches as one contiguous run
        # of its raster bytes: a few crops per channel, then only slicing (no Python work per
        # pixel or per patch crop, which held the GIL for most of a second per large image).
        run = patch * patch * 4
        columns = [
            [
                memoryview(
                    channel.crop((j * patch, 0, (j + 1) * patch, rows)).tobytes("raw", "F;32F")
                )
                for j in range(grid_w)
            ]
            for channel in channels
        ]
        pieces: list[memoryview] = []
        for block_row in range(grid_h // merge):
            for block_col in range(grid_w // merge):
                for row in range(merge):
                    start = (block_row * merge + row) * run
                    for col in range(merge):
                        j = block_col * merge + col
                        for by_column in columns:
                            pieces.extend([by_column[j][start : start + run]] * frames)
        patches = grid_h * grid_w
        return ProcessedImage(
            pixel_values=b"".join(pieces),
            patches=patches,
            patch_dim=3 * frames * patch * patch,
            grid_thw=(1, grid_h, grid_w),
            tokens=patches // (merge * merge),
        )
