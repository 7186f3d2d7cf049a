"""Real images made with Pillow, as bytes and as data URIs."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image


def image_bytes(
    fmt: str = "PNG", size: tuple[int, int] = (32, 24), mode: str = "RGB", color: object = None
) -> bytes:
    image = Image.new(mode, size, color if color is not None else (200, 30, 90))
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (8, 8), color) for color in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=50)
    return out.getvalue()


def png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels but holds almost no data: decoding
    it would fail (or allocate the whole canvas); only the header check can answer correctly."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 16)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"
