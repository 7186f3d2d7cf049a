"""A request's images: read and measured from their headers without decoding, then decoded a
bounded number at a time in the whole process (whatever the requests and event loops)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from PIL import Image

from turnout.config import ImagesConfig
from turnout.multimodal import BadImage, LoadedImage, decode_images, read_images
from turnout.multimodal.loading import DECODE_THREADS, in_order
from turnout.multimodal.qwen2_vl import Qwen2VLVision

from .helpers import data_uri, image_bytes, png_claiming

CONFIG = ImagesConfig()


async def test_reading_measures_images_without_decoding_them() -> None:
    # The second image claims 4000 x 4000 pixels with no pixel data behind: reading it
    # succeeds (its header is all that is read), decoding it fails.
    real = image_bytes("PNG", (40, 30))
    encoded = await read_images([data_uri(real), data_uri(png_claiming(4000, 4000))], CONFIG)
    assert [image.size for image in encoded] == [(40, 30), (4000, 4000)]
    assert [image.format for image in encoded] == ["png", "png"]
    assert encoded[0].data == real
    assert encoded[0].source == "data"
    with pytest.raises(BadImage, match=r"^image 1: the image cannot be decoded"):
        await decode_images(encoded, CONFIG, lambda loaded: loaded.size)


@pytest.mark.parametrize("size", [(28, 28), (120, 60), (603, 300), (4000, 3000), (3, 600)])
def test_an_images_tokens_are_known_from_its_size(size: tuple[int, int]) -> None:
    vision = Qwen2VLVision()
    image = Image.new("RGB", size, (10, 20, 30))
    assert vision.image_tokens(*size) == vision.preprocess(image).tokens


def test_an_aspect_ratio_the_model_cannot_take_is_known_from_the_size() -> None:
    with pytest.raises(ValueError, match="aspect ratio"):
        Qwen2VLVision().image_tokens(603, 3)


class Overlap:
    """How many decoded images are being worked on at once, at most."""

    def __init__(self, hold_s: float = 0.05) -> None:
        #: How long each image's step takes: long enough for every free decode thread to
        #: start another image meanwhile.
        self.hold_s = hold_s
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0
        self.calls = 0

    def step(self, loaded: LoadedImage) -> tuple[int, int]:
        with self.lock:
            self.calls += 1
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.hold_s)
        with self.lock:
            self.now -= 1
        return loaded.size


def test_decoding_is_bounded_across_requests_and_event_loops() -> None:
    """Three requests of six images each, on three event loops in three threads (as in
    ``serve --processes 1`` with many clients), never have more than DECODE_THREADS images
    decoded at once, and each gets its own images back in order."""
    overlap = Overlap()
    sizes = [(8 + i, 8) for i in range(6)]
    uris = [data_uri(image_bytes("PNG", size)) for size in sizes]
    results: list[list[tuple[int, int]]] = []

    async def one_request() -> list[tuple[int, int]]:
        encoded = await read_images(uris, CONFIG)
        return await decode_images(encoded, CONFIG, overlap.step)

    def run() -> None:
        results.append(asyncio.run(one_request()))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == [sizes] * 3
    assert overlap.peak == DECODE_THREADS


async def test_a_failed_request_does_not_decode_its_queued_images() -> None:
    """When one image fails, the request's images still waiting for a decode thread are
    dropped: they cost no decoding."""
    overlap = Overlap(hold_s=0.5)  # the time the event loop has to see the failure
    bad = data_uri(png_claiming(64, 64))
    good = [data_uri(image_bytes("PNG", (8, 8)))] * 6
    encoded = await read_images([bad, *good], ImagesConfig(max_images=7))
    with pytest.raises(BadImage, match=r"^image 0: "):
        await decode_images(encoded, CONFIG, overlap.step)
    await asyncio.sleep(1.2)  # what was already running has finished
    assert overlap.calls <= DECODE_THREADS  # started before the failure was seen; no more


async def test_a_later_image_failing_first_is_the_failure_named() -> None:
    """Image 1 fails while image 0 still runs: image 0 is cancelled because of it, and the
    error names image 1 (it was a RuntimeError, a 500, when image 0 came first by position)."""

    async def slow() -> str:
        await asyncio.sleep(10)
        return "never"

    async def broken() -> str:
        raise BadImage("the image cannot be decoded")

    with pytest.raises(BadImage, match=r"^image 1: the image cannot be decoded") as raised:
        await in_order([slow(), broken()])
    assert raised.value.index == 1
