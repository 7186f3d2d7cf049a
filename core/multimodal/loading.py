"""A request's images: read and checked from their headers first, decoded a bounded number at
a time after.

:func:`read_images` takes a request's image sources (URLs in the order the prompt shows them)
and returns :class:`~turnout.multimodal.images.EncodedImage`\\ s: the bytes, checked, with the
format and size read from the header, no pixel decoded (see :mod:`turnout.multimodal.images`
for the checks; URLs are checked by :mod:`turnout.multimodal.fetch` before anything is
downloaded). The caller can count each image's tokens from its size and refuse a request that
cannot fit before :func:`decode_images` spends memory on it. :func:`load_images` does both.

Decoding runs on a pool of :data:`DECODE_THREADS` threads shared by the whole process (every
request, every event loop): a decoded image holds its whole pixel buffer (up to ``max_pixels``
x 4 bytes) until the step given to :func:`decode_images` has reduced it, so the pool bounds the
memory decoding takes however many requests carry images. Nothing blocking runs on the event
loop. The first failure (by position) is raised as an :class:`ImageError` with its index (a 400
for the client); the other images of the request are then cancelled.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

from turnout.config import ImagesConfig
from turnout.multimodal.errors import BadImage, ImageError, TooManyImages
from turnout.multimodal.fetch import ImageFetcher
from turnout.multimodal.images import (
    EncodedImage,
    LoadedImage,
    decode_data_uri,
    decode_image,
    probe_image,
)

__all__ = ["DECODE_THREADS", "decode_images", "in_order", "load_images", "read_images"]

T = TypeVar("T")

#: Images decoded (and reduced by the caller's step) at once in this process.
DECODE_THREADS: Final = 2


class _DecodePool:
    """The process's decode threads, started on first use (and again in a forked child, which
    inherits the executor but not its threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pid = 0

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(
                    DECODE_THREADS, thread_name_prefix="turnout-image-decode"
                )
                self._pid = os.getpid()
            return self._executor


_POOL: Final = _DecodePool()


async def in_order(steps: Sequence[Awaitable[T]]) -> list[T]:
    """The results of ``steps``, run concurrently, in their order. The first failure by
    position is raised (an :class:`ImageError` with its index) and the other steps are
    cancelled."""
    if not steps:
        return []
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:  # the others are not needed once one failed (or the caller went away)
        for task in tasks:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    # A step before the failed one may have been cancelled because of it: the failure is the
    # first step that failed, not the first that did not finish.
    for index, outcome in enumerate(outcomes):
        if isinstance(outcome, ImageError):
            raise type(outcome)(str(outcome), index) from None
        if isinstance(outcome, BaseException) and not isinstance(outcome, asyncio.CancelledError):
            raise outcome
    results: list[T] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException):  # pragma: no cover - only a failure cancels
            raise RuntimeError("an image step was cancelled") from None
        results.append(outcome)
    return results


def _read_data_uri(uri: str, config: ImagesConfig) -> EncodedImage:
    return probe_image(decode_data_uri(uri, config), config)


async def _read_one(url: str, config: ImagesConfig, fetcher: ImageFetcher) -> EncodedImage:
    if url[:5].lower() == "data:":  # the base64 of up to max_bytes: off the loop too
        return await asyncio.to_thread(_read_data_uri, url, config)
    fetched = await fetcher.fetch(url)
    return await asyncio.to_thread(probe_image, fetched.data, config, fetched.url)


async def read_images(
    urls: Sequence[str], config: ImagesConfig, fetcher: ImageFetcher | None = None
) -> list[EncodedImage]:
    """Every image of a request, in order, checked from its header and not decoded."""
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
    return await in_order([_read_one(url, config, fetcher) for url in urls])


def _decode_then(image: EncodedImage, config: ImagesConfig, then: Callable[[LoadedImage], T]) -> T:
    return then(decode_image(image.data, config, image.source))


async def decode_images(
    images: Sequence[EncodedImage], config: ImagesConfig, then: Callable[[LoadedImage], T]
) -> list[T]:
    """``then`` of each image decoded, in order, on the process's decode threads: ``then``
    runs in the same thread right after the decoding, so that the full-size pixels are freed
    as soon as it returns (a request's images are never all decoded at once)."""
    loop = asyncio.get_running_loop()
    pool = _POOL.executor()
    return await in_order(
        [loop.run_in_executor(pool, _decode_then, image, config, then) for image in images]
    )


def _loaded(image: LoadedImage) -> LoadedImage:
    return image


async def load_images(
    urls: Sequence[str], config: ImagesConfig, fetcher: ImageFetcher | None = None
) -> list[LoadedImage]:
    """:func:`read_images` then :func:`decode_images`: every image of a request, decoded."""
    return await decode_images(await read_images(urls, config, fetcher), config, _loaded)
