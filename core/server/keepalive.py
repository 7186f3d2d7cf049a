"""Keep-alive comments of idle streams: when no piece of a stream's body went out for its
interval, a comment line is sent so that proxies keep the connection open. One timer per
loop watches every stream (:class:`KeepAlives`); each stream has a :class:`KeepAlive`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import weakref

from litestar.types import Send

from turnout.server.sse import KEEPALIVE
from turnout.tasks import cancel_and_wait

__all__ = ["KeepAlive", "KeepAlives", "board_of"]


class KeepAlive:
    """Sends a comment when the body was silent for ``interval`` seconds.

    On its loop's :class:`KeepAlives` board, whose one timer checks every stream when one is
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
        self._board = board_of(loop)
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


class KeepAlives:
    """The keep-alives of one loop's streams, on one loop timer due when the first of them is
    (rescheduled only when a new one is due earlier; when it runs, it checks them all). It
    holds no reference to its loop: the loop's entry in ``_boards`` goes with the loop."""

    __slots__ = ("__weakref__", "_due", "_streams", "_timer")

    def __init__(self) -> None:
        self._streams: dict[KeepAlive, None] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0

    def add(self, stream: KeepAlive, loop: asyncio.AbstractEventLoop) -> None:
        """Watch ``stream`` (of the running ``loop``)."""
        self._streams[stream] = None
        due = stream.due()
        if self._timer is None or due < self._due:
            self._schedule(loop, due)

    def remove(self, stream: KeepAlive) -> None:
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


_boards: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, KeepAlives] = (
    weakref.WeakKeyDictionary()
)


def board_of(loop: asyncio.AbstractEventLoop) -> KeepAlives:
    """The keep-alive board of ``loop`` (made on first use)."""
    board = _boards.get(loop)
    if board is None:
        board = _boards[loop] = KeepAlives()
    return board
