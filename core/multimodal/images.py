"""Image inputs: from ``data:`` URIs or allowed ``https`` URLs to checked, decoded images.

:func:`load_images` takes a request's image sources (URLs in the order the prompt shows them)
and returns :class:`LoadedImage`\\ s, or raises the first :class:`ImageError` (a 400 for the
client). The checks, in order: the number of images; per image the URL policy (see
:mod:`turnout.multimodal.fetch`) or the data URI's form and media type, the encoded size, the
format (only the configured Pillow decoders are tried), the pixel count read from the header
*before* decoding (decompression bombs), no animation, then a full decode that must succeed.
Decoding runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import binascii
import hashlib
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote_to_bytes

from PIL import Image, UnidentifiedImageError

from turnout.config import IMAGE_FORMATS, ImagesConfig
from turnout.multimodal.errors import BadImage, ImageError, ImageTooLarge, TooManyImages
from turnout.multimodal.fetch import ImageFetcher

__all__ = [
    "SUPPORTED_FORMATS",
    "LoadedImage",
    "decode_data_uri",
    "decode_image",
    "load_images",
]

#: The media types of each format the config may allow.
_MEDIA_TYPES: Final = {
    "png": ("image/png",),
    "jpeg": ("image/jpeg", "image/jpg", "image/pjpeg"),
    "webp": ("image/webp",),
    "gif": ("image/gif",),
    "bmp": ("image/bmp", "image/x-ms-bmp"),
    "tiff": ("image/tiff",),
}
SUPPORTED_FORMATS: Final = IMAGE_FORMATS
assert set(_MEDIA_TYPES) == SUPPORTED_FORMATS, "a configurable format without its media types"


@dataclass(frozen=True, slots=True)
class LoadedImage:
    """A decoded image and where it came from."""

    image: Image.Image
    #: Lower-case Pillow format name (``png``…).
    format: str
    #: SHA-256 of the encoded bytes (the same picture sent twice has the same digest).
    sha256: str
    encoded_bytes: int
    #: ``data`` or the https URL it was downloaded from (after redirects).
    source: str

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) in pixels."""
        return self.image.size


def decode_data_uri(uri: str, config: ImagesConfig) -> bytes:
    """The bytes of a ``data:`` URI whose media type is an allowed image format."""
    header, comma, payload = uri.partition(",")
    if not comma or not header.lower().startswith("data:"):
        raise BadImage("a data URI needs the form data:<media type>;base64,<data>")
    params = [p.strip().lower() for p in header[5:].split(";")]
    media_type = params[0]
    allowed = {t for name in config.formats for t in _MEDIA_TYPES[name]}
    if media_type not in allowed:
        shown = media_type or "none"
        raise BadImage(f"data URI media type {shown!r} is not one of {sorted(allowed)}")
    limit = config.max_bytes
    if "base64" in params[1:]:
        compact = "".join(payload.split())
        if len(compact) // 4 * 3 > limit + 2:
            raise ImageTooLarge(f"the image is larger than {limit} bytes")
        try:
            data = binascii.a2b_base64(compact, strict_mode=True)
        except binascii.Error:
            raise BadImage("the data URI is not valid base64") from None
    else:
        if len(payload) > 3 * limit:  # percent-encoding takes at most 3 characters a byte
            raise ImageTooLarge(f"the image is larger than {limit} bytes")
        data = unquote_to_bytes(payload)
    if len(data) > limit:
        raise ImageTooLarge(f"the image is larger than {limit} bytes")
    if not data:
        raise BadImage("the data URI is empty")
    return data


def decode_image(data: bytes, config: ImagesConfig, source: str = "data") -> LoadedImage:
    """Decode ``data`` under ``config``'s format and pixel limits (blocking: call in a thread)."""
    if len(data) > config.max_bytes:
        raise ImageTooLarge(f"the image is larger than {config.max_bytes} bytes")
    formats = [name.upper() for name in config.formats]
    try:
        # Opening reads the header only; Pillow's own bomb check (MAX_IMAGE_PIXELS, above the
        # config's highest max_pixels) stays as a second line.
        image = Image.open(io.BytesIO(data), formats=formats)
        width, height = image.size
        if width <= 0 or height <= 0:
            raise BadImage("the image has no pixels")
        if width * height > config.max_pixels:
            raise ImageTooLarge(
                f"the image has {width}x{height} pixels, more than {config.max_pixels}"
            )
        if getattr(image, "n_frames", 1) > 1:
            raise BadImage("animated images are not supported")
        image.load()
    except ImageError:
        raise
    except UnidentifiedImageError:
        raise BadImage(f"not an image in an allowed format ({', '.join(config.formats)})") from None
    except Image.DecompressionBombError:
        raise ImageTooLarge("the image has too many pixels") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise BadImage(f"the image cannot be decoded ({exc})") from None
    name = (image.format or "").lower()
    return LoadedImage(image, name, hashlib.sha256(data).hexdigest(), len(data), source)


async def _load_one(url: str, config: ImagesConfig, fetcher: ImageFetcher) -> LoadedImage:
    if url[:5].lower() == "data:":
        data = decode_data_uri(url, config)
        source = "data"
    else:
        fetched = await fetcher.fetch(url)
        data, source = fetched.data, fetched.url
    return await asyncio.to_thread(decode_image, data, config, source)


async def load_images(
    urls: Sequence[str], config: ImagesConfig, fetcher: ImageFetcher | None = None
) -> list[LoadedImage]:
    """Every image of a request, in order; the first failure (by position) is raised with
    its index, and the other downloads are cancelled."""
    if len(urls) > config.max_images:
        raise TooManyImages(
            f"the request has {len(urls)} images, more than the {config.max_images} allowed"
        )
    fetcher = fetcher or ImageFetcher(config)
    for index, url in enumerate(urls):  # refuse what is not allowed before fetching anything
        if not isinstance(url, str) or not url:
            raise BadImage("an image needs a data: URI or an https URL", index)
        if url[:5].lower() != "data:":
            try:
                fetcher.check_url(url)
            except ImageError as exc:
                raise type(exc)(str(exc), index) from None
    if not urls:
        return []
    tasks = [asyncio.ensure_future(_load_one(url, config, fetcher)) for url in urls]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # the others are not needed once one failed (or the caller went away)
        for task in tasks:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    images: list[LoadedImage] = []
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, ImageError):
            raise type(outcome)(str(outcome), index) from None
        if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
            raise outcome
        if isinstance(outcome, LoadedImage):
            images.append(outcome)
    if len(images) != len(urls):  # pragma: no cover - a failure was raised above
        raise RuntimeError("an image load was cancelled")
    return images
