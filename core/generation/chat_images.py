"""Images in chat messages: the image parts of a request, their model's vision, and what the
prompt and the worker request get from them.

The chat template renders one placeholder per image part (see
:mod:`turnout.tokenizer.content_parts`); here each image is read and checked from its header
(:func:`turnout.multimodal.read_images`), the prompt's length with the images' tokens checked,
then each image decoded and preprocessed, its placeholder expanded to as many tokens as the
image takes, and the pixels put in a ``MultimodalInputs`` for the worker. Every
failure is a 400 naming the image's part (``messages[i].content[j]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from turnout.errors import ApiError, bad_request
from turnout.generation.models import ModelRuntime
from turnout.generation.unsupported import unsupported
from turnout.multimodal import (
    BadImage,
    EncodedImage,
    ImageError,
    LoadedImage,
    decode_images,
    read_images,
)
from turnout.multimodal.mm_inputs import (
    check_placeholders,
    expand_image_tokens,
    multimodal_inputs,
)
from turnout.multimodal.qwen2_vl import ProcessedImage, Qwen2VLVision
from turnout.multimodal.vision import Vision
from turnout.tokenizer.content_parts import media_kind
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = ["ImagePart", "image_parts", "prompt_images", "vision_for"]


@dataclass(frozen=True, slots=True)
class ImagePart:
    """One image of the request, in the order the prompt shows it."""

    #: ``messages[i].content[j]``: what a 400 about it names.
    param: str
    #: A ``data:`` URI or an https URL.
    url: str


def _url(part: dict[str, Any]) -> object:
    """The URL of an image part: ``image_url: {"url": …}`` (Chat Completions), ``image_url:
    "…"`` (Responses' ``input_image``, and clients that send it so), or ``image: "…"``."""
    given = part.get("image_url", part.get("image"))
    return given.get("url") if isinstance(given, dict) else given


def image_parts(messages: Sequence[Any]) -> list[ImagePart]:
    """The image parts of chat ``messages`` (msgspec structs with ``content``); a 400 for an
    image part without a URL, and for video and audio parts (turnout takes images only)."""
    parts: list[ImagePart] = []
    for i, message in enumerate(messages):
        content = message.content
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            kind = media_kind(part)
            if kind is None:
                continue
            param = f"messages[{i}].content[{j}]"
            if kind != "image":
                raise unsupported(param, f"{part['type']} parts are not supported: images only")
            url = _url(part)
            if not isinstance(url, str) or not url:
                raise bad_request(
                    f"{param}: an image part needs image_url.url (a data: URI or an https URL)",
                    param,
                )
            parts.append(ImagePart(param, url))
    return parts


def vision_for(runtime: ModelRuntime, parts: Sequence[ImagePart]) -> Vision:
    """The model's vision; a 400 naming the first image when the model takes none."""
    vision = runtime.vision
    if isinstance(vision, str):
        raise unsupported(parts[0].param, f"model {runtime.model_id!r} takes no images: {vision}")
    return vision


def _image_tokens(vision: Vision, images: Sequence[EncodedImage]) -> list[int]:
    """Each image's placeholder tokens, from its size alone."""
    counts = []
    for index, image in enumerate(images):
        try:
            counts.append(vision.processor.image_tokens(*image.size))
        except ValueError as exc:  # smart_resize: an aspect ratio the model cannot take
            raise BadImage(str(exc), index) from None
    return counts


def _preprocessor(processor: Qwen2VLVision) -> Callable[[LoadedImage], ProcessedImage]:
    def preprocess(loaded: LoadedImage) -> ProcessedImage:
        try:
            return processor.preprocess(loaded.image)
        except ValueError as exc:  # pragma: no cover - the size was checked before decoding
            raise BadImage(str(exc)) from None

    return preprocess


async def prompt_images(
    vision: Vision,
    parts: Sequence[ImagePart],
    prompt_ids: Sequence[int],
    fits: Callable[[int], None],
) -> tuple[list[int], pb.MultimodalInputs]:
    """The prompt with each image's placeholder expanded, and the images for the worker.

    The images are read and checked from their headers first; ``fits`` gets the length the
    expanded prompt will have and raises when the request cannot be served (too long for the
    context, or for the tenant's budget), so that nothing is decoded for a request refused
    anyway. Then they are decoded (a bounded number at a time in the process) and each is
    preprocessed right after its decoding."""
    try:
        encoded = await read_images([part.url for part in parts], vision.config, vision.fetcher)
        tokens = _image_tokens(vision, encoded)
        check_placeholders(prompt_ids, vision.image_token_id, len(encoded))
        fits(len(prompt_ids) - len(encoded) + sum(tokens))
        processed = await decode_images(encoded, vision.config, _preprocessor(vision.processor))
        ids, ranges = expand_image_tokens(prompt_ids, vision.image_token_id, processed)
    except ImageError as exc:
        param = parts[exc.index].param if exc.index is not None else "messages"
        raise ApiError(400, str(exc), param=param, code=exc.code) from None
    # copying hundreds of MB of pixels: off the event loop
    inputs = await asyncio.to_thread(multimodal_inputs, processed, ranges, vision.image_token_id)
    return ids, inputs
