"""Per-request deadlines on one loop timer.

``asyncio.timeout`` schedules a loop timer per use and cancels it at the end; a request that
uses two (its body deadline, its request timeout) pays for both, although nearly every request
ends long before either. :class:`Deadlines` keeps the deadlines of the requests in progress in
a dict and runs one timer for all of them, due at the earliest: it is rescheduled only when a
new deadline is earlier than the one it is due at, and when it runs it fires what is due and
waits for the earliest of the rest. A request's deadline then costs a dict insert and removal.

:meth:`Deadlines.at` behaves like ``asyncio.timeout_at`` (a ``with`` rather than ``async with``
block: entering and leaving it never wait): when the deadline passes inside the block, the task
is cancelled and the block raises :class:`TimeoutError`, unless somebody else cancelled the task
too (then the cancellation goes on). :meth:`Deadlines.watch` puts anything :class:`Expiring`
(a gRPC call's deadline) on the same timer: its ``expire()`` runs once its ``when`` has passed,
unless :meth:`Deadlines.forget` took it off before.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Protocol

__all__ = ["Deadline", "Deadlines", "Expiring"]

#: A deadline this close is due when the timer runs (loop timers may run a little early).
_SLACK_S = 0.001


class Expiring(Protocol):
    """What a :class:`Deadlines` board watches: a loop time, and what to do once it passed."""

    @property
    def when(self) -> float:
        """The loop time at which ``expire`` is due."""

    def expire(self) -> None:
        """The time has come (called once, by the board's timer)."""


class Deadline:
    """One ``with`` block of a task under a deadline (see :meth:`Deadlines.at`)."""

    __slots__ = ("_board", "_cancelling", "_expired", "_inside", "_loop", "_task", "when")

    def __init__(
        self, board: Deadlines, when: float, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self._board = board
        self.when = when
        self._loop = loop
        self._expired = False
        self._inside = False

    def expired(self) -> bool:
        """True when the deadline passed inside the block (it cancelled the task)."""
        return self._expired

    def __enter__(self) -> Deadline:
        # One loop look-up at most: on Python 3.11 each is a getpid() system call.
        loop = self._loop or asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a deadline is for a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._inside = True
        if self.when != math.inf:
            self._board.watch(self, loop)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._inside = False
        self._board.forget(self)
        if (
            self._expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    def expire(self) -> None:
        """The deadline passed inside the block: cancel the task."""
        self._expired = True
        self._task.cancel()

    def cut(self) -> None:
        """End the wait now, as if the deadline had passed (once; nothing outside the block)."""
        if self._inside and not self._expired:
            self._board.forget(self)
            self.expire()


class Deadlines:
    """The deadlines of the blocks in progress, on one loop timer (see the module doc)."""

    __slots__ = ("_due", "_loop", "_pending", "_timer")

    def __init__(self) -> None:
        self._pending: dict[Expiring, None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0

    def at(self, when: float, loop: asyncio.AbstractEventLoop | None = None) -> Deadline:
        """A ``with`` block that times out at loop time ``when``; ``loop``: the running loop,
        when the caller has it at hand (the block is entered in a task of that loop)."""
        return Deadline(self, when, loop)

    def after(self, delay: float | None) -> Deadline:
        """A ``with`` block that times out ``delay`` s from now (None: never)."""
        if delay is None:
            return Deadline(self, math.inf)
        loop = asyncio.get_running_loop()
        return Deadline(self, loop.time() + delay, loop)

    def watch(self, item: Expiring, loop: asyncio.AbstractEventLoop) -> None:
        """Call ``item.expire()`` once loop time ``item.when`` has passed (``loop``: the
        running loop), unless :meth:`forget` takes it off first."""
        if loop is not self._loop:  # first use, or the app now serves on another loop
            self._loop, self._timer = loop, None
            self._pending.clear()
        self._pending[item] = None
        if self._timer is None or item.when < self._due:
            self._schedule(item.when)

    def forget(self, item: Expiring) -> None:
        """Take ``item`` off the board (nothing happens if it is not on it)."""
        self._pending.pop(item, None)

    def _schedule(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._due = when
        self._timer = self._loop.call_at(when, self._run)

    def _run(self) -> None:
        self._timer = None
        assert self._loop is not None
        now = self._loop.time() + _SLACK_S
        pending = self._pending
        due = [item for item in pending if item.when <= now]
        for item in due:
            if item in pending:  # an earlier item's ``expire`` may have taken it off
                del pending[item]
                item.expire()
        if pending:
            self._schedule(min(item.when for item in pending))
