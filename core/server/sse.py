"""Server-sent events framing, the error event, and keep-alive comments for idle streams."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from turnout.server.errors import ApiError

DONE = b"data: [DONE]\n\n"
KEEPALIVE = b": keep-alive\n\n"
_encode = msgspec.json.Encoder().encode


def sse(payload: Any) -> bytes:
    """One ``data:`` event carrying ``payload`` as JSON."""
    return b"data: " + _encode(payload) + b"\n\n"


def sse_error(error: ApiError) -> bytes:
    """The error event sent when a stream fails after it started."""
    return b"data: " + error.to_json() + b"\n\n"


_END = object()


async def with_keepalive(source: AsyncIterator[bytes], interval: float) -> AsyncIterator[bytes]:
    """Forward ``source``; when it is silent for ``interval`` seconds, send a comment line.

    A pump task moves items into a queue, so waiting with a timeout never cancels a read of the
    source itself (which would break a gRPC stream mid-message).
    """
    if interval <= 0:
        async for item in source:
            yield item
        return
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=64)

    async def pump() -> None:
        try:
            async for item in source:
                await queue.put(item)
        except BaseException as exc:
            await queue.put(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        await queue.put(_END)

    task = asyncio.create_task(pump())
    try:
        while True:
            try:
                item = queue.get_nowait()
            except asyncio.QueueEmpty:
                try:
                    async with asyncio.timeout(interval):
                        item = await queue.get()
                except TimeoutError:
                    yield KEEPALIVE
                    continue
            # Send everything already waiting as one write (fewer ASGI messages and syscalls).
            batch: list[bytes] = []
            while True:
                if item is _END:
                    if batch:
                        yield b"".join(batch)
                    return
                if isinstance(item, BaseException):
                    if batch:
                        yield b"".join(batch)
                    raise item
                batch.append(item)
                try:
                    item = queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
            yield b"".join(batch)
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(BaseException):
                await aclose()
