"""Fixtures: real gRPC test workers on loopback and a fast-ticking registry."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import (
    BreakerSettings,
    HealthSettings,
    LoadMonitorSettings,
    RetrySettings,
    WorkerSpec,
    WorkersSettings,
)

from ._worker import TestWorker


def fast_settings(specs: list[WorkerSpec] | None = None, **changes: object) -> WorkersSettings:
    base = {
        "workers": specs or [],
        "health": HealthSettings(
            interval_s=0.2,
            timeout_s=0.5,
            pending_interval_s=0.05,
            failure_threshold=2,
            success_threshold=1,
        ),
        "circuit_breaker": BreakerSettings(failure_threshold=3, success_threshold=1, timeout_s=0.3),
        "retry": RetrySettings(initial_backoff_ms=1, max_backoff_ms=5),
        "load_monitor": LoadMonitorSettings(interval_s=0.05),
        "drain_timeout_s": 5.0,
    }
    base.update(changes)
    return WorkersSettings(**base)  # type: ignore[arg-type]


@pytest.fixture
async def workers() -> AsyncIterator[Callable[..., object]]:
    started: list[TestWorker] = []

    async def make(n: int = 1, model: str = "m") -> list[TestWorker]:
        new = [await TestWorker(model).start() for _ in range(n)]
        started.extend(new)
        return new

    yield make
    for w in started:
        await w.stop()


@pytest.fixture
async def registry_for() -> AsyncIterator[Callable[..., object]]:
    made: list[WorkerRegistry] = []

    async def make(fleet: list[TestWorker], wait: bool = True, **changes: object) -> WorkerRegistry:
        specs = [WorkerSpec(url=w.url) for w in fleet]
        registry = WorkerRegistry(fast_settings(specs, **changes))
        made.append(registry)
        await registry.start()
        if wait:
            for worker in registry.all():
                assert await registry.wait_ready(worker.id, 5.0), worker.info()
        return registry

    yield make
    for registry in made:
        await registry.stop()
