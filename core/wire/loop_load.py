"""How busy the event loop is: how long a callback that becomes ready waits before it runs.

A loop that has many streams to step runs each newly ready callback later: the wait is about the
length of the loop's turns, which is also what a new request waits for before its task starts.
``LoopLoad`` samples that wait once per period, and only while someone asks (a process with no
stream open arms nothing). The worker streams use it to pace their reads while the loop is busy:
see ``NativeCall`` and the ``busy_read_interval_ms`` wire setting.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Final

__all__ = ["LoopLoad", "loop_load"]

#: Seconds between two samples while someone asks.
SAMPLE_PERIOD_S: Final = 0.05
#: Sampling stops (and the past is forgotten) after this many periods in which nobody asked.
IDLE_PERIODS: Final = 20
#: Weight of the newest sample in the moving average of the wait.
_SMOOTHING: Final = 0.3
#: The loop counts as busy once a ready callback waits this long on average (s) …
BUSY_WAIT_S: Final = 0.002
#: … and as quiet again once the average falls below this (hysteresis: pacing, which makes the
#: turns shorter, must not switch itself off at once).
QUIET_WAIT_S: Final = 0.0005

_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopLoad] = (
    weakref.WeakKeyDictionary()
)


class LoopLoad:
    """The smoothed wait of one loop's ready callbacks, and whether the loop is busy."""

    __slots__ = ("_armed", "_idle_periods", "_loop", "_probed_at", "_wanted", "busy", "wait_s")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._armed = False
        self._wanted = False
        self._idle_periods = 0
        self._probed_at = 0.0
        #: Moving average of how long a ready callback waited to run (s).
        self.wait_s = 0.0
        #: True while the loop is busy (see ``BUSY_WAIT_S`` and ``QUIET_WAIT_S``).
        self.busy = False

    def is_busy(self) -> bool:
        """Whether the loop is busy now; keeps sampling for another period."""
        self._wanted = True
        if not self._armed:
            self._arm()
        return self.busy

    def _arm(self) -> None:
        self._armed = True
        self._loop.call_later(SAMPLE_PERIOD_S, self._probe)

    def _probe(self) -> None:
        # perf_counter, not loop.time(): uvloop's clock only moves once per turn, in ms.
        self._probed_at = time.perf_counter()
        self._loop.call_soon(self._measure)

    def _measure(self) -> None:
        wait = time.perf_counter() - self._probed_at
        self.wait_s += _SMOOTHING * (wait - self.wait_s)
        self.busy = self.wait_s > (QUIET_WAIT_S if self.busy else BUSY_WAIT_S)
        if self._wanted:
            self._wanted = False
            self._idle_periods = 0
        else:
            self._idle_periods += 1
        if self._idle_periods < IDLE_PERIODS:
            self._arm()
            return
        # Nobody asked for a while: stop, and forget the past, so that an old burst does not
        # make the next stream look busy.
        self._armed = False
        self._idle_periods = 0
        self.wait_s = 0.0
        self.busy = False


def loop_load(loop: asyncio.AbstractEventLoop | None = None) -> LoopLoad:
    """The ``LoopLoad`` of the running loop (one per loop); ``loop``: the running loop, when
    the caller has it at hand."""
    if loop is None:
        loop = asyncio.get_running_loop()
    load = _by_loop.get(loop)
    if load is None:
        load = _by_loop[loop] = LoopLoad(loop)
    return load
