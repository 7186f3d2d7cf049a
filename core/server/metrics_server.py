"""``/metrics`` on a separate port (``server.metrics_port``), served on the app's event loop.

A deliberately tiny HTTP/1.0 responder: ``GET /metrics`` answers the exposition, anything else
404; one request per connection. It runs on the same loop as the app, so the worker collector
reads the registry without threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from turnout.observability.metrics import CONTENT_TYPE, multiprocess_mode

log = logging.getLogger(__name__)
_READ_TIMEOUT_S = 10.0


def _response(status: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"HTTP/1.0 {status}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


async def _handle(
    render: Callable[[], bytes], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        async with asyncio.timeout(_READ_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        method, _, rest = head.partition(b" ")
        target = rest.partition(b" ")[0].partition(b"?")[0]
        if method in (b"GET", b"HEAD") and target == b"/metrics":
            answer = _response("200 OK", render(), CONTENT_TYPE)
            if method == b"HEAD":
                answer = answer.partition(b"\r\n\r\n")[0] + b"\r\n\r\n"
        else:
            answer = _response("404 Not Found", b"not found\n", "text/plain")
        writer.write(answer)
        await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def metrics_listener(host: str, port: int, render: Callable[[], bytes]) -> AsyncIterator[int]:
    """Serve ``/metrics`` (``render()``, which gets no key from the scraper) on ``host:port``
    while the block runs; yields the bound port."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _handle(render, reader, writer)

    # Several uvicorn worker processes share the port; any of them answers for all.
    server = await asyncio.start_server(handle, host, port, reuse_port=multiprocess_mode())
    bound: int = server.sockets[0].getsockname()[1]
    log.info("metrics on http://%s:%d/metrics", host, bound)
    try:
        yield bound
    finally:
        server.close()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                await server.wait_closed()
