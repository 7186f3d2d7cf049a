"""The garbage collector's settings for a serving process.

CPython's cyclic collector runs every 700 net container allocations by default, and a full
collection walks every tracked object. A router holding a thousand open streams allocates fast
and keeps a large heap: full collections then stop the event loop for tens to hundreds of
milliseconds, which every open stream and every new request waits for. Objects made while
starting (the app, routes, plugins, config) live as long as the process: they are frozen out of
the collector's walks once the app has started, and young collections run less often, so fewer
short-lived objects are promoted into the generations that full collections walk. Reference
counting still frees everything that is not in a cycle at once.
"""

from __future__ import annotations

import gc
from typing import Final

__all__ = ["GEN0_THRESHOLD", "settle_collector"]

#: Net container allocations between young collections (CPython's default is 700).
GEN0_THRESHOLD: Final = 20_000


def settle_collector() -> None:
    """Collect once, freeze what survives (start-up objects) and raise the young threshold."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, gen1, gen2)
