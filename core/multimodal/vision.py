"""Whether a model takes images, and what its image inputs need: the image settings, the
preprocessing, the placeholder token and the downloader.

A model takes images when its ``config.json`` has a ``vision_config`` (what makes SGLang report
``supports_vision``), an ``image_token_id``, and a ``model_type`` whose preprocessing turnout
does (Qwen2-VL's, see :mod:`turnout.multimodal.qwen2_vl`), and its chat template renders image
parts. Each of these is decided once, when the model's runtime is built; a request with images
for any other model is a 400 that says which one is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from turnout.config import ImagesConfig
from turnout.multimodal.fetch import ImageFetcher
from turnout.multimodal.qwen2_vl import Qwen2VLVision

__all__ = ["PREPROCESSED_MODEL_TYPES", "Vision", "model_vision"]

#: ``model_type``\ s whose images turnout preprocesses (Qwen2.5-VL uses Qwen2-VL's processor).
PREPROCESSED_MODEL_TYPES: Final = frozenset({"qwen2_vl", "qwen2_5_vl"})


@dataclass(frozen=True, slots=True)
class Vision:
    """What a request with images needs of its model."""

    config: ImagesConfig
    processor: Qwen2VLVision
    #: The token the chat template's image placeholder holds, repeated once per image token.
    image_token_id: int
    fetcher: ImageFetcher


def model_vision(
    *,
    has_vision_config: bool,
    model_type: str,
    image_token_id: int | None,
    template_media: frozenset[str],
    directory: Path,
    config: ImagesConfig,
) -> Vision | str:
    """The model's :class:`Vision`, or why it takes no images (for the 400 a request gets)."""
    if not has_vision_config:
        return "it is not a vision model (its config.json has no vision_config)"
    if model_type not in PREPROCESSED_MODEL_TYPES:
        return (
            f"turnout does not preprocess images for model_type {model_type!r} "
            f"(only {', '.join(sorted(PREPROCESSED_MODEL_TYPES))})"
        )
    if image_token_id is None:
        return "its config.json names no image_token_id"
    if "image" not in template_media:
        return "its chat template renders no image parts"
    return Vision(
        config=config,
        processor=Qwen2VLVision.from_model_dir(directory),
        image_token_id=image_token_id,
        fetcher=ImageFetcher(config),
    )
