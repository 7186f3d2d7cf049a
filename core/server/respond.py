"""Turn endpoint results into Litestar responses: JSON bodies or SSE streams."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.types import ASGIApp, Receive, Scope, Send

from turnout.generation.flow import Folded, Generated
from turnout.observability.metrics import note_failure, note_stream_cut
from turnout.server.context import Services
from turnout.server.errors import ApiError
from turnout.server.sse import (
    DONE,
    EventStream,
    sse_batch,
    sse_error,
    sse_typed_batch,
    sse_typed_error,
)

_encode = msgspec.json.Encoder().encode
log = logging.getLogger(__name__)


def answer_json(body: Any, status: int = 200) -> Response[bytes]:
    """A JSON response encoded with msgspec."""
    return Response(_encode(body), status_code=status, media_type="application/json")


class JsonAnswer:
    """A JSON body as a bare ASGI app, which Litestar sends as it is: the answer of a generation
    request, without building a :class:`~litestar.Response` and converting it per request.
    (``x-request-id`` is added by the ops middleware, like on every answer.)"""

    __slots__ = ("body", "status")

    def __init__(self, body: bytes, status: int = 200) -> None:
        self.body = body
        self.status = status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body
        await send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(body)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})


def answer_error(error: ApiError) -> Response[bytes]:
    """An OpenAI-style error response."""
    return Response(
        error.to_json(),
        status_code=error.status,
        media_type="application/json",
        headers=error.headers or None,
    )


async def sse_body(
    batches: AsyncGenerator[list[Any], None], *, typed: bool = False
) -> AsyncIterator[bytes]:
    """Frame each batch of payloads as one piece of SSE (``typed``: as named events, see
    :func:`sse_typed_batch`); an error after the stream started becomes an error event (the
    response's tail, ``[DONE]`` for untyped streams, follows in every case). Closing the body
    closes ``batches`` at once (which ends the request on its workers)."""
    sent = 0
    try:
        if typed:
            async for payloads in batches:
                sent += len(payloads)
                yield sse_typed_batch(payloads)
        else:
            async for payloads in batches:
                yield sse_batch(payloads)
    except ApiError as exc:
        note_stream_cut(exc.status)
        yield _error_event(exc, typed, sent)
    except Exception as exc:  # a stream must end cleanly whatever broke
        log.exception("stream failed")
        note_failure(exc)
        note_stream_cut(500)
        yield _error_event(ApiError(500, f"internal error: {type(exc).__name__}"), typed, sent)
    finally:
        await batches.aclose()


def _error_event(error: ApiError, typed: bool, sent: int) -> bytes:
    # A typed stream numbers its events from 0: the error is the next one.
    return sse_typed_error(error, sent) if typed else sse_error(error)


def answer_generated(
    generated: Generated, services: Services, request: Request[Any, Any, Any]
) -> ASGIApp:
    """The response of a generation request: one JSON body, or an SSE stream."""
    if isinstance(generated, Folded):
        return JsonAnswer(_encode(generated.body))
    stream = answer_stream(generated.payloads, services, typed=generated.typed_events)
    return stream.to_asgi_response(None, request)


def answer_stream(
    batches: AsyncGenerator[list[Any], None], services: Services, *, typed: bool = False
) -> EventStream:
    """An SSE response: one piece per batch of payloads, keep-alive comments while idle; an
    untyped stream ends with ``[DONE]``, a typed one (OpenAI's Responses API) with its last
    event."""
    return EventStream(
        sse_body(batches, typed=typed),
        tail=b"" if typed else DONE,
        keepalive_s=services.config.server.keepalive_interval_s,
    )
