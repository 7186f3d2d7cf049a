"""Multimodal inputs: images from ``data:`` URIs and allowed ``https`` URLs, checked from their
headers and then decoded with Pillow (see :mod:`turnout.multimodal.loading`), with typed errors
the endpoints answer 400; Qwen2-VL's preprocessing (:mod:`turnout.multimodal.qwen2_vl`) and the
``MultimodalInputs`` message SGLang workers read (:mod:`turnout.multimodal.mm_inputs`)."""

from turnout.multimodal.errors import (
    BadImage,
    ImageError,
    ImageFetchFailed,
    ImageNotAllowed,
    ImageTooLarge,
    TooManyImages,
)
from turnout.multimodal.fetch import FetchedImage, ImageFetcher
from turnout.multimodal.images import (
    EncodedImage,
    LoadedImage,
    decode_data_uri,
    decode_image,
    probe_image,
)
from turnout.multimodal.loading import decode_images, load_images, read_images

__all__ = [
    "BadImage",
    "EncodedImage",
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
    "decode_images",
    "load_images",
    "probe_image",
    "read_images",
]
