"""Typed errors for image inputs; each is a client error (HTTP 400) with a stable ``code``."""

from __future__ import annotations

from typing import ClassVar

from turnout.errors import TurnoutError

__all__ = [
    "BadImage",
    "ImageError",
    "ImageFetchFailed",
    "ImageNotAllowed",
    "ImageTooLarge",
    "TooManyImages",
]


class ImageError(TurnoutError):
    """An image input the request cannot have. ``code`` is the OpenAI-style error code, ``index``
    the image's position among the request's images (None for the request as a whole); the
    message is meant for the client and names no internal address."""

    code: ClassVar[str] = "invalid_image"

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message if index is None else f"image {index}: {message}")
        self.index = index


class BadImage(ImageError):
    """Not an image turnout takes: undecodable, truncated, animated, a format not allowed, a
    malformed data URI."""

    code = "invalid_image"


class TooManyImages(ImageError):
    """More images in one request than allowed."""

    code = "too_many_images"


class ImageTooLarge(ImageError):
    """Too many bytes, or too many pixels."""

    code = "image_too_large"


class ImageNotAllowed(ImageError):
    """A URL the operator does not allow: not https, a host not listed, or an address that is
    not public."""

    code = "image_url_not_allowed"


class ImageFetchFailed(ImageError):
    """An allowed URL that gave no image: unreachable, an HTTP error, too slow."""

    code = "image_fetch_failed"
