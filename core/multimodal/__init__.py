"""Multimodal inputs: images from ``data:`` URIs and allowed ``https`` URLs, checked and decoded
with Pillow (see :mod:`turnout.multimodal.images`), with typed errors the endpoints answer 400;
Qwen2-VL's preprocessing (:mod:`turnout.multimodal.qwen2_vl`) and the ``MultimodalInputs``
message SGLang workers read (:mod:`turnout.multimodal.mm_inputs`)."""

from turnout.multimodal.errors import (
    BadImage,
    ImageError,
    ImageFetchFailed,
    ImageNotAllowed,
    ImageTooLarge,
    TooManyImages,
)
from turnout.multimodal.fetch import FetchedImage, ImageFetcher
from turnout.multimodal.images import LoadedImage, decode_data_uri, decode_image, load_images

__all__ = [
    "BadImage",
    "FetchedImage",
    "ImageError",
    "ImageFetchFailed",
    "ImageFetcher",
    "ImageNotAllowed",
    "ImageTooLarge",
    "LoadedImage",
    "TooManyImages",
    "decode_data_uri",
    "decode_image",
    "load_images",
]
