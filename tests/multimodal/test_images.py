"""Image inputs from data URIs: decoding, formats, sizes, pixel limits, counts — real images."""

from __future__ import annotations

import asyncio
import hashlib
import urllib.parse

import pytest
from PIL import Image

from turnout.config import ImagesConfig, build_config
from turnout.errors import ConfigError
from turnout.multimodal import (
    BadImage,
    ImageNotAllowed,
    ImageTooLarge,
    TooManyImages,
    decode_data_uri,
    decode_image,
    load_images,
)

from .helpers import animated_gif, data_uri, image_bytes, png_claiming

CONFIG = ImagesConfig()


@pytest.mark.parametrize(
    ("fmt", "media_type", "name"),
    [
        ("PNG", "image/png", "png"),
        ("JPEG", "image/jpeg", "jpeg"),
        ("JPEG", "image/jpg", "jpeg"),
        ("WEBP", "image/webp", "webp"),
        ("GIF", "image/gif", "gif"),
    ],
)
def test_allowed_formats_decode(fmt: str, media_type: str, name: str) -> None:
    data = image_bytes(fmt)
    [loaded] = asyncio.run(load_images([data_uri(data, media_type)], CONFIG))
    assert loaded.format == name
    assert loaded.size == (32, 24)
    assert loaded.sha256 == hashlib.sha256(data).hexdigest()
    assert loaded.encoded_bytes == len(data)
    assert loaded.source == "data"
    loaded.image.load()  # already decoded: no file left behind to read


def test_percent_encoded_data_uri() -> None:
    data = image_bytes()
    uri = "data:image/png," + urllib.parse.quote_from_bytes(data)
    assert decode_data_uri(uri, CONFIG) == data


@pytest.mark.parametrize(
    ("uri", "error", "message"),
    [
        ("data:image/png;base64,@@@@", BadImage, "not valid base64"),
        ("data:text/plain;base64,aGVsbG8=", BadImage, "media type 'text/plain'"),
        ("data:;base64,aGVsbG8=", BadImage, "media type 'none'"),
        ("data:image/png;base64", BadImage, "form data:"),
        ("data:image/png;base64,", BadImage, "empty"),
        ("data:image/svg+xml;base64,PHN2Zy8+", BadImage, "image/svg"),
    ],
)
def test_malformed_data_uris(uri: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        decode_data_uri(uri, CONFIG)


def test_not_an_image_and_truncated_images_are_bad() -> None:
    with pytest.raises(BadImage, match="not an image in an allowed format"):
        decode_image(b"GIF89a but not really", CONFIG)
    truncated = image_bytes("PNG", (64, 64))[:-40]
    with pytest.raises(BadImage, match="cannot be decoded"):
        decode_image(truncated, CONFIG)
    with pytest.raises(BadImage, match="animated"):
        decode_image(animated_gif(), CONFIG)


def test_formats_outside_the_allow_list_are_not_tried() -> None:
    png_only = ImagesConfig(formats=["png"])
    jpeg = image_bytes("JPEG")
    with pytest.raises(BadImage, match=r"allowed format \(png\)"):
        decode_image(jpeg, png_only)  # a real JPEG, but the JPEG decoder is not allowed
    with pytest.raises(BadImage, match="media type 'image/jpeg'"):
        decode_data_uri(data_uri(jpeg, "image/jpeg"), png_only)
    # the declared type may be wrong; the content decides, within the allow-list
    assert decode_image(jpeg, CONFIG).format == "jpeg"
    assert decode_data_uri(data_uri(jpeg, "image/png"), CONFIG) == jpeg


def test_byte_limit_before_and_after_decoding_base64() -> None:
    data = image_bytes("PNG", (64, 64))
    tight = ImagesConfig(max_bytes=len(data) - 1)
    with pytest.raises(ImageTooLarge, match=f"larger than {len(data) - 1} bytes"):
        decode_data_uri(data_uri(data), tight)
    huge = "data:image/png;base64," + "A" * 4_000_000  # refused from its length alone
    with pytest.raises(ImageTooLarge):
        decode_data_uri(huge, ImagesConfig(max_bytes=1000))
    assert decode_data_uri(data_uri(data), ImagesConfig(max_bytes=len(data))) == data


def test_pixel_limit_is_checked_before_decoding() -> None:
    # 5000 x 5000 claimed with no pixel data behind: decoding would fail as truncated, so an
    # "image too large" answer proves the size was checked from the header first.
    bomb = png_claiming(5000, 5000)
    with pytest.raises(ImageTooLarge, match="5000x5000 pixels"):
        decode_image(bomb, CONFIG)
    with pytest.raises(BadImage, match="cannot be decoded"):
        decode_image(bomb, ImagesConfig(max_pixels=25_000_000))
    # beyond Pillow's own threshold, its bomb error is answered the same way
    with pytest.raises(ImageTooLarge):
        decode_image(png_claiming(20_000, 20_000), ImagesConfig(max_pixels=89_478_485))
    small = ImagesConfig(max_pixels=32 * 24)
    assert decode_image(image_bytes(), small).size == (32, 24)
    with pytest.raises(ImageTooLarge):
        decode_image(image_bytes("PNG", (33, 24)), small)


def test_count_limit_and_error_positions() -> None:
    uri = data_uri(image_bytes())
    config = ImagesConfig(max_images=2)
    with pytest.raises(TooManyImages, match="3 images, more than the 2 allowed"):
        asyncio.run(load_images([uri] * 3, config))
    with pytest.raises(BadImage, match=r"^image 1: the data URI is not valid base64"):
        asyncio.run(load_images([uri, "data:image/png;base64,@@"], config))
    # URLs are checked before anything is downloaded or decoded
    with pytest.raises(ImageNotAllowed, match=r"^image 1: images from 'example.com'"):
        asyncio.run(load_images([uri, "https://example.com/a.png"], config))
    with pytest.raises(ImageNotAllowed, match="must be https"):
        asyncio.run(load_images(["http://example.com/a.png"], config))
    with pytest.raises(BadImage, match="needs a data: URI"):
        asyncio.run(load_images([""], config))
    assert asyncio.run(load_images([], config)) == []


def test_modes_survive_decoding() -> None:
    rgba = decode_image(image_bytes("PNG", mode="RGBA", color=(1, 2, 3, 4)), CONFIG)
    assert rgba.image.mode == "RGBA"
    gray = decode_image(image_bytes("PNG", mode="L", color=7), CONFIG)
    assert gray.image.mode == "L"
    assert isinstance(gray.image, Image.Image)


def test_config_section() -> None:
    config = build_config(
        {
            "images": {"allowed_domains": ["cdn.example.com", "*.example.org"], "max_images": 2},
            "models": {"m": {"images": {"max_images": 0}}},
        }
    )
    assert config.images.allowed_domains == ["cdn.example.com", "*.example.org"]
    assert config.images.max_bytes == 20 * 1024 * 1024
    assert config.models["m"].images is not None
    assert config.models["m"].images.max_images == 0
    for bad, where in [
        ({"images": {"formats": ["png", "svg"]}}, "images.formats"),
        ({"images": {"allowed_domains": ["https://x.com"]}}, "images.allowed_domains"),
        ({"images": {"allowed_domains": ["a.*.com"]}}, "images.allowed_domains"),
        ({"images": {"max_pixels": 10**9}}, "images.max_pixels"),
        ({"images": {"fetch_timeout_s": 0}}, "images.fetch_timeout_s"),
        ({"models": {"m": {"images": {"max_bytes": 0}}}}, "models.m.images.max_bytes"),
        ({"models": {"m": {"images": {"formats": ["heic"]}}}}, "models.m.images.formats"),
    ]:
        with pytest.raises(ConfigError, match=where):
            build_config(bad)
