"""Turn endpoint results into Litestar responses: JSON bodies or SSE streams."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Response
from litestar.response import Stream

from turnout.observability.metrics import note_failure
from turnout.server.context import Services
from turnout.server.errors import ApiError
from turnout.server.sse import DONE, sse, sse_error, with_keepalive

Answer = Response[bytes] | Stream
_encode = msgspec.json.Encoder().encode
log = logging.getLogger("turnout.server")


def answer_json(body: Any, status: int = 200) -> Response[bytes]:
    """A JSON response encoded with msgspec."""
    return Response(_encode(body), status_code=status, media_type="application/json")


def answer_error(error: ApiError) -> Response[bytes]:
    """An OpenAI-style error response."""
    return Response(error.to_json(), status_code=error.status, media_type="application/json")


async def sse_body(payloads: AsyncIterator[Any]) -> AsyncIterator[bytes]:
    """Frame payloads as SSE; an error after the stream started becomes an error event; always
    ends with ``[DONE]``."""
    try:
        async for payload in payloads:
            yield sse(payload)
    except ApiError as exc:
        yield sse_error(exc)
    except Exception as exc:  # a stream must end cleanly whatever broke
        log.exception("stream failed")
        note_failure(exc)
        yield sse_error(ApiError(500, f"internal error: {type(exc).__name__}"))
    yield DONE


def answer_stream(payloads: AsyncIterator[Any], services: Services) -> Stream:
    """An SSE response with keep-alive comments while the stream is idle."""
    interval = services.config.server.keepalive_interval_s
    return Stream(
        with_keepalive(sse_body(payloads), interval),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )
