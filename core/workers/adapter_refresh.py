"""Asking a model's workers again for their LoRA adapters when a request names one the router
does not know: an adapter loaded at run time through another serving process or replica (or on
the worker itself) routes at once instead of after the next health probe.

At most one refresh per model per ``min_interval_s`` (requests for an adapter that really does
not exist cannot turn into a stream of calls to the workers), each bounded by ``timeout_s``;
requests arriving while one runs wait for that one.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from turnout.workers.registry import WorkerRegistry

__all__ = ["AdapterRefresher"]


class AdapterRefresher:
    """``await refresher(model)``: the model's workers' adapters, asked again (rate-limited)."""

    def __init__(
        self,
        registry: WorkerRegistry,
        *,
        min_interval_s: float = 0.25,
        timeout_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.min_interval_s = min_interval_s
        self.timeout_s = timeout_s
        self._clock = clock
        self._last: dict[str, float] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    async def __call__(self, model: str) -> None:
        task = self._running.get(model)
        if task is None:
            now = self._clock()
            if now - self._last.get(model, -math.inf) < self.min_interval_s:
                return
            self._last[model] = now
            task = asyncio.get_running_loop().create_task(
                self.registry.refresh_adapters(model, self.timeout_s)
            )
            self._running[model] = task
            task.add_done_callback(lambda _t: self._running.pop(model, None))
        # Shielded: one caller going away does not cancel the refresh the others wait for.
        await asyncio.shield(task)
