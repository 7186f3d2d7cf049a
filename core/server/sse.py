"""Server-sent events: framing, the error event, and the streaming response that frames and sends
batches of payloads, with keep-alive comments while a stream is idle."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import weakref
from collections.abc import Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final

import msgspec
from litestar import Request, Response
from litestar.datastructures import Cookie
from litestar.response.base import ASGIResponse
from litestar.types import Receive, Scope, Send

from turnout.errors import ApiError
from turnout.observability.metrics import note_failure, note_stream_cut
from turnout.server.direct_body import DirectBody, direct_body_of
from turnout.tasks import cancel_and_wait

if TYPE_CHECKING:
    from turnout.generation.flow import PayloadStream

__all__ = [
    "DONE",
    "KEEPALIVE",
    "EventStream",
    "sse_batch",
    "sse_error",
    "sse_typed_batch",
    "sse_typed_error",
]

DONE: Final = b"data: [DONE]\n\n"
KEEPALIVE: Final = b": keep-alive\n\n"
_encode = msgspec.json.Encoder().encode
log = logging.getLogger(__name__)


def sse_batch(payloads: Sequence[Any]) -> bytes:
    """Several ``data:`` events as one piece of the body (one write)."""
    if len(payloads) == 1:  # the usual stream step: one event, no list to build and join
        return b"data: " + _encode(payloads[0]) + b"\n\n"
    return b"".join([b"data: " + _encode(payload) + b"\n\n" for payload in payloads])


def sse_error(error: ApiError) -> bytes:
    """The error event sent when a stream fails after it started."""
    return b"data: " + error.to_json() + b"\n\n"


def sse_typed_batch(payloads: Iterable[dict[str, Any]]) -> bytes:
    """Several typed events as one piece of the body: each is named by its payload's ``type``
    (``event: response.output_text.delta``), as OpenAI's Responses API streams them."""
    return b"".join(
        [
            b"event: " + payload["type"].encode() + b"\ndata: " + _encode(payload) + b"\n\n"
            for payload in payloads
        ]
    )


def sse_typed_error(error: ApiError, sequence_number: int) -> bytes:
    """The ``error`` event of a typed stream that fails after it started: the fields of
    OpenAI's error event, and the error object under ``error`` (which clients raise)."""
    detail = error.body()["error"]
    return sse_typed_batch(
        [
            {
                "type": "error",
                "code": detail["code"],
                "message": detail["message"],
                "param": detail["param"],
                "sequence_number": sequence_number,
                "error": detail,
            }
        ]
    )


class EventStream(Response[bytes]):
    """A ``text/event-stream`` response: each batch of payloads as one piece, then the tail
    (``[DONE]``; nothing for a typed stream, which ends with its last event).

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
        self,
        batches: PayloadStream,
        *,
        typed: bool = False,
        keepalive_s: float = 0.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            b"",
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no", **(headers or {})},
        )
        self._batches = batches
        self._typed = typed
        self._keepalive_s = keepalive_s

    def to_asgi_response(
        self,
        app: Any,
        request: Request[Any, Any, Any],
        *,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        **_: Any,
    ) -> ASGIResponse:
        """The ASGI side of the response (called by Litestar)."""
        merged = {**headers, **self.headers} if headers else dict(self.headers)
        return _EventStreamAsgi(
            self._batches,
            self._typed,
            self._keepalive_s,
            headers=merged,
            cookies=[*self.cookies, *(cookies or ())],
            encoded_headers=encoded_headers,
            media_type="text/event-stream",
            status_code=self.status_code or 200,
        )


class _EventStreamAsgi(ASGIResponse):
    __slots__ = ("_batches", "_keepalive_s", "_typed")

    _should_set_content_length: ClassVar[bool] = False

    def __init__(
        self,
        batches: PayloadStream,
        typed: bool,
        keepalive_s: float,
        **kwargs: Any,
    ) -> None:
        super().__init__(content_length=0, **kwargs)
        self._batches = batches
        self._typed = typed
        self._keepalive_s = keepalive_s

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Coroutine[Any, Any, None]:
        # A plain function handing back the stream's one coroutine: a stream holds every frame
        # of its chain (which the garbage collector visits) as long as it runs.
        if self.is_head_response:
            return super().__call__(scope, receive, send)
        return self._stream(send, direct_body_of(scope), head=True)

    async def send_body(self, send: Send, receive: Receive) -> None:
        """Send the events of the stream (through ``send``)."""
        await self._stream(send, None, head=False)

    async def _stream(self, send: Send, direct: DirectBody | None, *, head: bool) -> None:
        """The response head (if ``head``), then the one loop of a stream step: take a batch,
        frame it, send it (no await in between but the send, and the keep-alive's only when a
        comment is being sent right then); ``direct``: the connection's direct writes."""
        if head:
            await self.start_response(send=send)
        batches = self._batches
        typed = self._typed
        frame = sse_typed_batch if typed else sse_batch
        next_batch = batches.__anext__
        # A piece the connection takes directly is on its way as send's would be (no wait);
        # else (the client not reading, say) it goes through send.
        write = direct.write if direct is not None else None
        idle = _KeepAlive(send, self._keepalive_s) if self._keepalive_s > 0 else None
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
        if head:
            await self.after_response()


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


class _KeepAlive:
    """Sends a comment when the body was silent for ``interval`` seconds.

    On its loop's :class:`_KeepAlives` board, whose one timer checks every stream when one is
    due: no timer of its own, nothing per piece but a clock read. The comment is sent from a
    small task (in the request's context) while the body waits for its source; a piece that
    becomes ready meanwhile waits for that send to finish, so the two never interleave.
    """

    __slots__ = ("_board", "_busy", "_context", "_interval", "_last", "_loop", "_send", "_task")

    def __init__(self, send: Send, interval: float) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self._send = send
        self._interval = interval
        self._last = loop.time()
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self._context = contextvars.copy_context()
        self._board = _board_of(loop)
        self._board.add(self, loop)

    def before_send(self) -> asyncio.Task[None] | None:
        """Called before each piece: the keep-alive comment still being sent, which the piece
        must wait for (None nearly always)."""
        self._busy = True
        task = self._task
        return task if task is not None and not task.done() else None

    def sent(self) -> None:
        """Called after each piece."""
        self._busy = False
        self._last = self._loop.time()

    def due(self) -> float:
        """When the next comment is due (loop time), unless a piece goes out before."""
        return self._last + self._interval

    async def stop(self) -> None:
        """Leave the board; cancel a comment still being sent."""
        self._board.remove(self)
        task = self._task
        if task is not None:
            await cancel_and_wait(task)

    def check(self, now: float) -> float:
        """Start a comment if one is due at ``now`` (or a little later, see
        :data:`_EARLY`); when the next one is due."""
        interval = self._interval
        due = self._last + interval
        if due - interval * _EARLY <= now:
            if not self._busy and (self._task is None or self._task.done()):
                self._last = now
                self._task = self._loop.create_task(self._comment(), context=self._context)
            return now + interval if due <= now else due
        return due

    async def _comment(self) -> None:
        # A failed send means the client is gone; the gate notices that on its own.
        with contextlib.suppress(Exception):
            await self._send({"type": "http.response.body", "body": KEEPALIVE, "more_body": True})


#: A stream whose comment is due within this share of its interval gets it now: the board's
#: timer then runs a few times per interval at most however the streams' silences are spread.
_EARLY = 1 / 16
#: The context of the boards' timers (the comments run in their requests' contexts).
_NO_CONTEXT = contextvars.Context()


class _KeepAlives:
    """The keep-alives of one loop's streams, on one loop timer due when the first of them is
    (rescheduled only when a new one is due earlier; when it runs, it checks them all). It
    holds no reference to its loop: the loop's entry in ``_boards`` goes with the loop."""

    __slots__ = ("__weakref__", "_due", "_streams", "_timer")

    def __init__(self) -> None:
        self._streams: dict[_KeepAlive, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0

    def add(self, stream: _KeepAlive, loop: asyncio.AbstractEventLoop) -> None:
        """Watch ``stream`` (of the running ``loop``)."""
        self._streams[stream] = None
        due = stream.due()
        if self._timer is None or due < self._due:
            self._schedule(loop, due)

    def remove(self, stream: _KeepAlive) -> None:
        """Stop watching ``stream``."""
        self._streams.pop(stream, None)
        if not self._streams and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._due = when
        self._timer = loop.call_at(when, self._run, loop, context=_NO_CONTEXT)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        first = math.inf
        for stream in list(self._streams):
            first = min(first, stream.check(now))
        if self._streams:
            self._schedule(loop, first)


_boards: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _KeepAlives] = (
    weakref.WeakKeyDictionary()
)


def _board_of(loop: asyncio.AbstractEventLoop) -> _KeepAlives:
    board = _boards.get(loop)
    if board is None:
        board = _boards[loop] = _KeepAlives()
    return board
