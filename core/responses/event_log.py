"""The stream events of one background response, kept so that a client can read them again
from any sequence number (``GET /v1/responses/{id}?stream=true&starting_after=N``) and follow
the live ones until the end.

Events are kept in order, bounded in bytes (of JSON): past the bound the oldest are dropped,
and reading from before the first one kept is a 400. Readers wait on one event of the log,
set and replaced each time events are added (no queue per reader).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import Any

import msgspec

from turnout.errors import ApiError, bad_request

_encode = msgspec.json.Encoder().encode


class EventLog:
    """The typed events of one response (each with its ``sequence_number``, counting from 0
    without gaps), at most ``max_bytes`` of them."""

    __slots__ = ("_changed", "_events", "_first", "_max_bytes", "bytes", "ended")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        #: (event, its size in bytes), the oldest kept first.
        self._events: deque[tuple[dict[str, Any], int]] = deque()
        #: The sequence number of the oldest event kept.
        self._first = 0
        self.bytes = 0
        #: True once the response ended (no more events come).
        self.ended = False
        self._changed = asyncio.Event()

    @property
    def next_sequence(self) -> int:
        """The sequence number of the next event."""
        return self._first + len(self._events)

    def append(self, events: list[dict[str, Any]]) -> int:
        """Keep ``events`` (the next in sequence), dropping the oldest past the bound; wakes the
        readers. Returns the change in bytes kept."""
        before = self.bytes
        for event in events:
            size = len(_encode(event))
            self._events.append((event, size))
            self.bytes += size
        while self.bytes > self._max_bytes and len(self._events) > 1:
            _, size = self._events.popleft()
            self._first += 1
            self.bytes -= size
        self._wake()
        return self.bytes - before

    def end(self) -> None:
        """No more events: readers end once they read the last one."""
        self.ended = True
        self._wake()

    def after(self, sequence: int) -> list[dict[str, Any]]:
        """The events after ``sequence`` kept now (a 400 when some of them were dropped)."""
        start = sequence + 1 - self._first
        if start < 0:
            raise bad_request(
                f"the events before sequence number {self._first} are no longer kept: "
                f"starting_after must be at least {self._first - 1}",
                "starting_after",
            )
        if start >= len(self._events):
            return []
        return [event for event, _ in itertools.islice(self._events, start, None)]

    def follow(self, starting_after: int) -> Follower:
        """The events after ``starting_after``, then the live ones until the end."""
        self.after(starting_after)  # the 400, before an answer starts
        return Follower(self, starting_after)

    async def changed(self) -> None:
        """Return once events were added or the log ended."""
        await self._changed.wait()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()


class Follower:
    """One reader of an :class:`EventLog`: a payload stream (lists of events) for the SSE
    answer, ending after the log's last event."""

    __slots__ = ("_last", "_log")

    def __init__(self, log: EventLog, starting_after: int) -> None:
        self._log = log
        self._last = starting_after

    def __aiter__(self) -> Follower:
        return self

    async def __anext__(self) -> list[Any]:
        log = self._log
        while True:
            try:
                events = log.after(self._last)
            except ApiError as exc:  # this reader fell behind the bound
                raise ApiError(
                    400, f"the stream fell behind the events kept: {exc}", code="events_dropped"
                ) from None
            if events:
                self._last = events[-1]["sequence_number"]
                return events
            if log.ended:
                raise StopAsyncIteration
            await log.changed()

    async def aclose(self) -> None:
        """Stop reading (the response goes on)."""
