"""One image: a ``data:`` URI's bytes, the checks read from an image's header, its decoding.

The checks, in order: the data URI's form and media type, the encoded size, the format (only
the configured Pillow decoders are tried), the pixel count read from the header *before*
decoding (decompression bombs) and no animation; :func:`probe_image` stops there (no pixel is
decoded), :func:`decode_image` then decodes, which must succeed. Both block: the request's
images are read and decoded by :mod:`turnout.multimodal.loading`, in threads.
"""

from __future__ import annotations

import binascii
import contextlib
import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote_to_bytes

from PIL import Image, UnidentifiedImageError

from turnout.config import IMAGE_FORMATS, ImagesConfig
from turnout.multimodal.errors import BadImage, ImageError, ImageTooLarge

__all__ = [
    "SUPPORTED_FORMATS",
    "EncodedImage",
    "LoadedImage",
    "decode_data_uri",
    "decode_image",
    "probe_image",
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
class EncodedImage:
    """An image's bytes, checked from its header and not decoded."""

    data: bytes
    #: Lower-case Pillow format name (``png``…).
    format: str
    #: (width, height) in pixels, as the header says.
    size: tuple[int, int]
    #: ``data`` or the https URL it was downloaded from (after redirects).
    source: str


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


@contextlib.contextmanager
def _pillow_errors(config: ImagesConfig) -> Iterator[None]:
    """Pillow's exceptions as :class:`ImageError`\\ s."""
    try:
        yield
    except ImageError:
        raise
    except UnidentifiedImageError:
        raise BadImage(f"not an image in an allowed format ({', '.join(config.formats)})") from None
    except Image.DecompressionBombError:
        raise ImageTooLarge("the image has too many pixels") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise BadImage(f"the image cannot be decoded ({exc})") from None


def _open(data: bytes, config: ImagesConfig) -> Image.Image:
    """The image of ``data`` opened (its header read, no pixel decoded) and checked: size,
    format, pixel count, no animation."""
    if len(data) > config.max_bytes:
        raise ImageTooLarge(f"the image is larger than {config.max_bytes} bytes")
    formats = [name.upper() for name in config.formats]
    with _pillow_errors(config):
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
        if getattr(image, "n_frames", 1) > 1:  # counted from the frame headers
            raise BadImage("animated images are not supported")
    return image


def probe_image(data: bytes, config: ImagesConfig, source: str = "data") -> EncodedImage:
    """``data`` checked from its header under ``config``, not decoded (blocking: call in a
    thread; cheap, but some formats walk their frame headers)."""
    image = _open(data, config)
    return EncodedImage(data, (image.format or "").lower(), image.size, source)


def decode_image(data: bytes, config: ImagesConfig, source: str = "data") -> LoadedImage:
    """Decode ``data`` under ``config``'s format and pixel limits (blocking: call in a thread;
    a request's images go through :func:`turnout.multimodal.loading.decode_images`, which
    bounds how many decode at once)."""
    image = _open(data, config)
    with _pillow_errors(config):
        image.load()
    name = (image.format or "").lower()
    return LoadedImage(image, name, hashlib.sha256(data).hexdigest(), len(data), source)
