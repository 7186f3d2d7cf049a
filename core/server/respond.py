"""Turn endpoint results into Litestar responses: JSON bodies or SSE streams."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response
from litestar.types import ASGIApp, Receive, Scope, Send

from turnout.errors import ApiError
from turnout.generation.flow import Folded, Generated, PayloadStream
from turnout.server.context import Services
from turnout.server.sse import EventStream

_encode = msgspec.json.Encoder().encode


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


def answer_generated(generated: Generated, services: Services, scope: Scope) -> ASGIApp:
    """The response of a generation request (``scope``: its ASGI scope): one JSON body, or an
    SSE stream."""
    if isinstance(generated, Folded):
        return JsonAnswer(_encode(generated.body))
    stream = answer_stream(generated.payloads, services, typed=generated.typed_events)
    # Litestar's conversion takes a request object, built only here: a one-shot answer
    # does without it.
    return stream.to_asgi_response(None, Request(scope))


def answer_stream(
    batches: PayloadStream, services: Services, *, typed: bool = False
) -> EventStream:
    """An SSE response: one piece per batch of payloads, keep-alive comments while idle; an
    untyped stream ends with ``[DONE]``, a typed one (OpenAI's Responses API) with its last
    event."""
    return EventStream(
        batches, typed=typed, keepalive_s=services.config.server.keepalive_interval_s
    )
