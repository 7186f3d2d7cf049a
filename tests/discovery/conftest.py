"""Fixtures of the discovery tests: simulated workers, a fast registry, a scripted provider."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from turnout.config import DiscoveryConfig
from turnout.discovery import Backoff, DiscoveryManager, WorkerChange
from turnout.hookspecs import Register, hookimpl
from turnout.plugin_loader import Plugins, load_plugins
from turnout.sim import SimWorker
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import WorkerSpec

from ..routing.conftest import fast_settings


class QueueProvider:
    """A provider the test drives: each ``watch()`` yields what is put on the shared queue; a
    queued exception is raised instead (the provider crashes)."""

    instances: list[QueueProvider] = []  # noqa: RUF012 (a test registry of created providers)

    def __init__(self, channel: str = "a", **options: Any) -> None:
        if options:
            raise TypeError(f"unknown options: {', '.join(sorted(options))}")
        self.channel = channel
        self.queue: asyncio.Queue[WorkerChange | BaseException] = asyncio.Queue()
        self.watches = 0
        self.closed = 0
        QueueProvider.instances.append(self)

    def describe(self) -> str:
        return f"queue {self.channel}"

    async def watch(self) -> AsyncIterator[WorkerChange]:
        self.watches += 1
        try:
            while True:
                item = await self.queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.closed += 1


@hookimpl
def turnout_register_discovery(register: Register) -> None:
    register("queue", QueueProvider, description="changes a test puts on a queue")


@pytest.fixture
def plugins() -> Plugins:
    QueueProvider.instances.clear()
    return load_plugins(
        extra=[
            (SimpleNamespace(turnout_register_discovery=turnout_register_discovery), "tests", "0")
        ]
    )


def provider(channel: str = "a") -> QueueProvider:
    """The newest provider created for ``channel``."""
    return next(p for p in reversed(QueueProvider.instances) if p.channel == channel)


@pytest.fixture
async def sims() -> AsyncIterator[list[SimWorker]]:
    started = [await SimWorker(served_model_name="sim-model").start() for _ in range(3)]
    yield started
    for sim in started:
        await sim.stop()


@pytest.fixture
async def fleet(
    plugins: Plugins,
) -> AsyncIterator[Callable[..., Any]]:
    """``await fleet(entries, static=[...])`` → (registry, manager), both running."""
    made: list[tuple[WorkerRegistry, DiscoveryManager]] = []

    async def make(
        entries: list[dict[str, Any]], static: list[WorkerSpec] | None = None, **kwargs: Any
    ) -> tuple[WorkerRegistry, DiscoveryManager]:
        registry = WorkerRegistry(fast_settings(static or []))
        kwargs.setdefault("backoff", Backoff(initial_s=0.05, maximum_s=0.2, healthy_after_s=5))
        kwargs.setdefault("retry_interval_s", 0.05)
        manager = DiscoveryManager(registry, plugins.discovery, **kwargs)
        made.append((registry, manager))
        await registry.start()
        await manager.start([DiscoveryConfig(**entry) for entry in entries])
        return registry, manager

    yield make
    for registry, manager in made:
        await manager.stop()
        await registry.stop()
