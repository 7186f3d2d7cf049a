"""The garbage collector's settings for a serving process.

CPython's cyclic collector runs every 700 net container allocations by default, and a full
collection walks every tracked object. A router holding a thousand open streams allocates fast
and keeps a large heap: full collections then stop the event loop for tens to hundreds of
milliseconds, which every open stream and every new request waits for. Objects made while
starting (the app, routes, plugins, config) live as long as the process: they are frozen out of
the collector's walks once the app has started, and young collections run less often, so fewer
short-lived objects are promoted into the generations that full collections walk. Reference
counting still frees everything that is not in a cycle at once.

An open stream's objects live for seconds, longer than the space between young collections, so
they reach the middle generation, and a middle collection walks every open stream: 90–140 ms
at a thousand paced streams, measured landing at the end of each ramp of new streams with
CPython's default of one middle collection per 10 young ones. Requests, disconnects and failed
workers leave no reference cycles (tests/ops/test_stream_heap_e2e.py,
tests/generation/test_stream_heap.py), so there is little for that walk to find: it runs once
per :data:`MIDDLE_THRESHOLD` young collections instead.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["GEN0_THRESHOLD", "MIDDLE_THRESHOLD", "settle_collector"]

#: Net container allocations between young collections (CPython's default is 700).
GEN0_THRESHOLD: Final = 20_000
#: Young collections between middle-generation collections (CPython's default is 10).
MIDDLE_THRESHOLD: Final = 50


def settle_collector() -> None:
    """Collect once, freeze what survives (start-up objects) and set the thresholds."""
    gc.collect()
    gc.freeze()
    *_, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, MIDDLE_THRESHOLD, gen2)
