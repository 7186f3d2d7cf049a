"""Turn endpoint results into answers: JSON bodies, or SSE streams sent as bare ASGI apps.

A streamed answer passes four layers, each owning one thing:

1. the generation's event stream, whose renderer makes **payload batches**
   (:class:`~turnout.generation.flow.PayloadStream`: one list per step, closed to abort);
2. **SSE framing** (:mod:`turnout.server.sse`): a batch's payloads as the bytes of one piece;
3. the **stream answer** (:class:`StreamAnswer`): the head, one piece per batch, keep-alive
   comments while idle (:mod:`turnout.server.keepalive`), the error event and the tail;
4. **the connection** (:mod:`turnout.server.connections`): a piece goes out through ``send``,
   or straight to the socket when the connection offers a
   :class:`~turnout.server.direct_body.DirectBody`.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, Final

import msgspec
from litestar import Response
from litestar.types import ASGIApp, Receive, Scope, Send

from turnout.errors import ApiError
from turnout.generation.flow import Folded, Generated, PayloadStream
from turnout.observability.metrics import note_failure, note_stream_cut
from turnout.server.context import Services
from turnout.server.direct_body import DirectBody, direct_body_of
from turnout.server.keepalive import KeepAlive
from turnout.server.sse import DONE, sse_batch, sse_error, sse_typed_batch, sse_typed_error

_encode = msgspec.json.Encoder().encode
log = logging.getLogger(__name__)

#: The head of every SSE answer (``x-request-id`` is added by the ops middleware).
_STREAM_HEADERS: Final = (
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"content-type", b"text/event-stream; charset=utf-8"),
)


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


class StreamAnswer:
    """A ``text/event-stream`` answer as a bare ASGI app: each batch of payloads as one piece,
    then the tail (``[DONE]``; nothing for a typed stream, which ends with its last event).

    Each batch is framed and sent from the request's own task as one ASGI message (a piece
    carries every event that was ready together), with no generator in between; or written
    straight to the connection when it offers that (:class:`DirectBody`). An error of
    ``batches`` after the stream started becomes an error event, before the tail. When no piece
    went out for ``keepalive_s`` seconds, a comment line is sent so that proxies keep the
    connection open. A client that disconnects is noticed by the generation gate, which
    cancels the request's task: ``batches`` is then closed at once (which aborts the request on
    its worker).
    """

    __slots__ = ("_batches", "_keepalive_s", "_typed")

    def __init__(
        self, batches: PayloadStream, *, typed: bool = False, keepalive_s: float = 0.0
    ) -> None:
        self._batches = batches
        self._typed = typed
        self._keepalive_s = keepalive_s

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        # A plain function handing back the stream's one coroutine: a stream holds every frame
        # of its chain (which the garbage collector visits) as long as it runs.
        return self._stream(send, direct_body_of(scope))

    async def _stream(self, send: Send, direct: DirectBody | None) -> None:
        """The head, then the one loop of a stream step: take a batch, frame it, send it (no
        await in between but the send, and the keep-alive's only when a comment is being sent
        right then); ``direct``: the connection's direct writes."""
        await send({"type": "http.response.start", "status": 200, "headers": _STREAM_HEADERS})
        batches = self._batches
        typed = self._typed
        frame = sse_typed_batch if typed else sse_batch
        next_batch = batches.__anext__
        # A piece the connection takes directly is on its way as send's would be (no wait);
        # else (the client not reading, say) it goes through send.
        write = direct.write if direct is not None else None
        idle = KeepAlive(send, self._keepalive_s) if self._keepalive_s > 0 else None
        sent = 0  # events so far: a typed stream numbers them, its error event is the next one
        tail = b"" if typed else DONE
        try:
            while True:
                try:
                    payloads = await next_batch()
                except StopAsyncIteration:
                    break
                except Exception as exc:  # a stream must end cleanly whatever broke
                    # No local keeps the error: its traceback holds this frame (a cycle).
                    piece = _failure_event(_stream_failure(exc), sent, typed=typed)
                    failed = True
                else:
                    sent += len(payloads)
                    piece = frame(payloads)
                    failed = False
                if idle is not None:
                    pending = idle.before_send()
                    if pending is not None:
                        await pending
                if write is None or not write(piece):
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                if idle is not None:
                    idle.sent()
                if failed:
                    break
            if idle is not None:
                pending = idle.before_send()
                if pending is not None:
                    await pending
            await send({"type": "http.response.body", "body": tail, "more_body": False})
        finally:
            if idle is not None:
                await idle.stop()
            await batches.aclose()


def _failure_event(error: ApiError, sent: int, *, typed: bool) -> bytes:
    """The error event of a failed stream (a typed stream's is numbered after ``sent``)."""
    return sse_typed_error(error, sent) if typed else sse_error(error)


def _stream_failure(exc: Exception) -> ApiError:
    """The error to tell the client when a stream fails after it started (noted on the
    request's record: logged and counted as a cut stream, not as a 200)."""
    if isinstance(exc, ApiError):
        note_stream_cut(exc.status)
        return exc
    log.exception("stream failed", exc_info=exc)
    note_failure(exc)
    note_stream_cut(500)
    return ApiError(500, f"internal error: {type(exc).__name__}")


def answer_error(error: ApiError) -> Response[bytes]:
    """An OpenAI-style error response."""
    return Response(
        error.to_json(),
        status_code=error.status,
        media_type="application/json",
        headers=error.headers or None,
    )


def answer_generated(generated: Generated, services: Services) -> ASGIApp:
    """The answer of a generation request: one JSON body, or an SSE stream (keep-alive
    comments at the server's interval)."""
    if isinstance(generated, Folded):
        return JsonAnswer(_encode(generated.body))
    return StreamAnswer(
        generated.payloads,
        typed=generated.typed_events,
        keepalive_s=services.config.server.keepalive_interval_s,
    )
