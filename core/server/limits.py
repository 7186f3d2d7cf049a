"""Admission control: a concurrency limit with a bounded wait queue (by priority, then in
arrival order), and a watcher that notices a client leaving while its request waits or runs."""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Callable
from typing import Any, Protocol

from litestar.types import Receive, ReceiveMessage

from turnout.errors import ApiError
from turnout.tasks import cancel_and_wait


class QueueFull(ApiError):
    """429: every permit is taken and the wait queue is full."""

    def __init__(self, limit: int, queue_size: int) -> None:
        super().__init__(
            429,
            f"too many requests: {limit} running and {queue_size} waiting; retry later",
            code="admission_queue_full",
        )


class QueueTimeout(ApiError):
    """503: the request waited too long for a permit."""

    def __init__(self, waited_s: float) -> None:
        super().__init__(
            503,
            f"the router is overloaded: no capacity within {waited_s:g}s; retry later",
            code="admission_queue_timeout",
        )


class Draining(ApiError):
    """503: the router is shutting down."""

    def __init__(self) -> None:
        super().__init__(503, "turnout is shutting down", code="shutting_down")


class ClientGone(Exception):
    """The client disconnected while its request waited."""


class Permit:
    """One admitted request; :meth:`release` (idempotent) gives the slot to the next waiter."""

    __slots__ = ("_gate",)

    def __init__(self, gate: AdmissionGate | None) -> None:
        self._gate = gate

    def release(self) -> None:
        """Give the permit back."""
        gate, self._gate = self._gate, None
        if gate is not None:
            gate._release()


#: The permit of every request when there is no limit (releasing it does nothing).
_UNLIMITED = Permit(None)

#: A waiting request: (negated priority, arrival number, its future) — a heap entry.
_Waiter = tuple[int, int, asyncio.Future[None]]


class AdmissionGate:
    """At most ``limit`` requests at once (0: unlimited); up to ``queue_size`` more wait, the
    higher ``priority`` first and in arrival order within one, at most ``queue_timeout_s``
    each."""

    def __init__(
        self,
        limit: int,
        queue_size: int,
        queue_timeout_s: float,
        on_queue_change: Callable[[int], None] | None = None,
    ) -> None:
        self.limit = limit
        self._on_change = on_queue_change
        self.queue_size = max(queue_size, 0)
        self.queue_timeout_s = queue_timeout_s
        #: Permits held right now.
        self.active = 0
        self._waiters: list[_Waiter] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        """Requests waiting for a permit."""
        return len(self._waiters)

    async def acquire(self, client: ClientWatch | None = None, priority: int = 0) -> Permit:
        """A permit, now or after waiting; raises :class:`QueueFull`, :class:`QueueTimeout`,
        :class:`Draining` (via :meth:`reject_waiting`) or :class:`ClientGone` (``client``
        gone)."""
        if self.limit <= 0:
            return _UNLIMITED
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return Permit(self)
        if len(self._waiters) >= self.queue_size:
            raise QueueFull(self.limit, self.queue_size)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (-priority, next(self._arrivals), waiter)
        heapq.heappush(self._waiters, entry)
        self._changed()
        watcher = asyncio.ensure_future(client.wait_gone()) if client is not None else None
        try:
            pending: set[asyncio.Future[Any]] = {waiter}
            if watcher is not None:
                pending.add(watcher)
            timeout = self.queue_timeout_s if self.queue_timeout_s > 0 else None
            await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            self._abandon(entry)
            raise
        finally:
            if watcher is not None:
                watcher.cancel()
        if waiter.done() and not waiter.cancelled():
            waiter.result()  # raises Draining when the gate was closed
            if client is not None and client.gone:
                self._release()
                raise ClientGone
            return Permit(self)
        self._abandon(entry)
        if client is not None and client.gone:
            raise ClientGone
        raise QueueTimeout(self.queue_timeout_s)

    def reject_waiting(self) -> None:
        """Fail every waiting request with 503 (the router is shutting down)."""
        while self._waiters:
            _, _, waiter = heapq.heappop(self._waiters)
            if not waiter.done():
                waiter.set_exception(Draining())
        self._changed()

    def _abandon(self, entry: _Waiter) -> None:
        waiter = entry[2]
        with contextlib.suppress(ValueError):
            self._waiters.remove(entry)  # the queue is bounded: linear removal is fine
            heapq.heapify(self._waiters)
        self._changed()
        if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
            self._release()  # it was granted while we gave up: pass it on
        else:
            waiter.cancel()

    def _release(self) -> None:
        self.active -= 1
        while self._waiters:
            _, _, waiter = heapq.heappop(self._waiters)
            if not waiter.done():
                self.active += 1
                waiter.set_result(None)
                break
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self._waiters))


class Leaving(Protocol):
    """What a :class:`DisconnectSource` tells of its loss (a :class:`ClientWatch`)."""

    def client_left(self) -> None:
        """The connection is lost."""


class DisconnectSource(Protocol):
    """A connection that reports its own loss (the connection guard's protocol)."""

    @property
    def lost(self) -> bool:
        """True once the connection is gone."""

    def on_lost(self, listener: Leaving) -> None:
        """Call ``listener.client_left()`` when the connection is lost."""

    def forget(self, listener: Leaving) -> None:
        """Stop telling ``listener``."""


_DISCONNECT: ReceiveMessage = {"type": "http.disconnect"}


class ClientWatch:
    """Sole reader of the ASGI ``receive`` of one request, and the app's ``receive`` (call it).

    :meth:`start` reads the body in the request's task (no wait when it is already there, as it
    nearly always is) and buffers it for the app, then watches for the client leaving: through
    ``connection``'s loss when there is one (no task), else with a background task that keeps
    reading ``receive``. ``on_disconnect`` (one callable) is called when the client leaves.

    Light on purpose, as it lives as long as a stream: no event (a future only while somebody
    waits for the client to leave), no callback object of its own at the connection.
    """

    __slots__ = (
        "_buffered",
        "_connection",
        "_max",
        "_raw",
        "_task",
        "_waiter",
        "_watching",
        "gone",
        "on_disconnect",
    )

    def __init__(
        self, receive: Receive, max_body_bytes: int, connection: DisconnectSource | None = None
    ) -> None:
        self._raw = receive
        self._max = max_body_bytes
        self._connection = connection
        #: The body's messages not yet handed to the app (None once all were).
        self._buffered: list[ReceiveMessage] | None = None
        #: True once the client has left.
        self.gone = False
        #: Called (once) when the client leaves.
        self.on_disconnect: Callable[[], None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._task: asyncio.Future[None] | None = None
        self._watching = False

    async def start(self) -> None:
        """Read the body, then watch for a disconnect."""
        size = 0
        while True:
            message = await self._raw()
            if not self._keep(message):
                return
            if message["type"] != "http.request":
                continue
            size += len(message.get("body", b""))
            if size > self._max:
                return  # the app answers 413; stop reading an oversized body
            if not message.get("more_body", False):
                break
        connection = self._connection
        if connection is None:
            self._task = asyncio.ensure_future(self._watch())
        elif connection.lost:
            self.client_left()
        else:
            connection.on_lost(self)
            self._watching = True

    async def _watch(self) -> None:
        while self._keep(await self._raw()):
            pass

    def _keep(self, message: ReceiveMessage) -> bool:
        """Keep a message of the body for the app; False once the client has gone."""
        if message["type"] != "http.disconnect":
            if self._buffered is None:
                self._buffered = [message]
            else:
                self._buffered.append(message)
            return True
        self.client_left()
        return False

    def client_left(self) -> None:
        """The client has gone (called by the connection, or on reading a disconnect)."""
        if self.gone:
            return
        self.gone = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self.on_disconnect is not None:
            self.on_disconnect()

    async def wait_gone(self) -> None:
        """Return once the client has left."""
        if self.gone:
            return
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(waiter)  # one waiter's cancellation leaves the others waiting

    async def __call__(self) -> ReceiveMessage:
        """The next message for the app: the body, then (once the client left) a disconnect."""
        buffered = self._buffered
        if buffered:
            message = buffered.pop(0)
            if not buffered:
                self._buffered = None
            return message
        await self.wait_gone()
        return _DISCONNECT

    async def close(self) -> None:
        """Stop watching."""
        if self._watching and self._connection is not None:
            self._watching = False
            self._connection.forget(self)
        task = self._task
        if task is not None:
            await cancel_and_wait(task)
