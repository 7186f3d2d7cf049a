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
too (then the cancellation goes on).
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

__all__ = ["Deadline", "Deadlines"]

#: A deadline this close is due when the timer runs (loop timers may run a little early).
_SLACK_S = 0.001


class Deadline:
    """One ``with`` block of a task under a deadline (see :meth:`Deadlines.at`)."""

    __slots__ = ("_board", "_cancelling", "_expired", "_loop", "_task", "when")

    def __init__(
        self, board: Deadlines, when: float, loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self._board = board
        self.when = when
        self._loop = loop
        self._expired = False

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
        if self.when != math.inf:
            self._board._add(self, loop)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._board._pending.pop(self, None)
        if (
            self._expired
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError from exc

    def _fire(self) -> None:
        self._expired = True
        self._task.cancel()


class Deadlines:
    """The deadlines of the blocks in progress, on one loop timer (see the module doc)."""

    __slots__ = ("_due", "_loop", "_pending", "_timer")

    def __init__(self) -> None:
        self._pending: dict[Deadline, None] = {}
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

    def _add(self, deadline: Deadline, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:  # first use, or the app now serves on another loop
            self._loop, self._timer = loop, None
            self._pending.clear()
        self._pending[deadline] = None
        if self._timer is None or deadline.when < self._due:
            self._schedule(deadline.when)

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
        due = [deadline for deadline in self._pending if deadline.when <= now]
        for deadline in due:
            del self._pending[deadline]
            deadline._fire()
        if self._pending:
            self._schedule(min(deadline.when for deadline in self._pending))
