"""Test helpers for discovery providers: collect what ``watch()`` emits, fold it into a fleet.

::

    from turnout.testing.discovery import collect_changes, fleet_of

    async def test_lists_the_catalog():
        changes = await collect_changes(MyCatalog(url=...), count=1)
        assert [w.url for w in fleet_of(changes).values()] == ["grpc://10.0.0.1:30000"]

A provider that keeps running is closed after the changes were collected, as turnout closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from turnout.discovery.types import (
    Added,
    DiscoveredWorker,
    DiscoveryProvider,
    Draining,
    Removed,
    Snapshot,
    WorkerChange,
)

__all__ = ["collect_changes", "draining_of", "fleet_of"]


async def collect_changes(
    provider: DiscoveryProvider,
    *,
    count: int | None = None,
    until: Callable[[Sequence[WorkerChange]], bool] | None = None,
    timeout_s: float = 5.0,
) -> list[WorkerChange]:
    """Iterate ``provider.watch()`` until ``count`` changes came (or ``until(changes)`` holds,
    or the stream ends), then close it and return the changes. Waiting longer than
    ``timeout_s`` is an ``AssertionError`` that shows what came so far; so is an exception
    from ``watch()`` (chained)."""
    if count is None and until is None:
        raise ValueError("say when to stop: count= or until=")
    changes: list[WorkerChange] = []

    def done() -> bool:
        return (count is not None and len(changes) >= count) or (
            until is not None and until(changes)
        )

    stream = provider.watch()
    deadline = time.monotonic() + timeout_s
    try:
        while not done():
            left = deadline - time.monotonic()
            try:
                change = await asyncio.wait_for(anext(stream), max(left, 0.0))
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise AssertionError(
                    f"{type(provider).__name__}.watch(): no more changes within {timeout_s}s; "
                    f"got {changes!r}"
                ) from None
            except Exception as exc:
                raise AssertionError(
                    f"{type(provider).__name__}.watch() raised {exc!r} after {changes!r}"
                ) from exc
            changes.append(change)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
    return changes


def _fold(changes: Sequence[WorkerChange]) -> tuple[dict[str, DiscoveredWorker], set[str]]:
    up: dict[str, DiscoveredWorker] = {}
    draining: set[str] = set()
    for change in changes:
        if isinstance(change, Snapshot):
            # Workers it lists as draining stay registered (draining); the others not listed go.
            kept = {key: worker for key, worker in up.items() if key in change.draining}
            up = {**kept, **{worker.key: worker for worker in change.workers}}
            draining = set(change.draining)
        elif isinstance(change, Added):
            up[change.worker.key] = change.worker
            draining.discard(change.worker.key)
        elif isinstance(change, Draining):
            draining.add(change.key)
        elif isinstance(change, Removed):
            up.pop(change.key, None)
            draining.discard(change.key)
    return up, draining


def fleet_of(changes: Sequence[WorkerChange]) -> dict[str, DiscoveredWorker]:
    """The workers taking requests after ``changes``, by key (not draining, not removed): a
    :class:`Snapshot` replaces the fleet, adds, drains and removals apply in order."""
    up, draining = _fold(changes)
    return {key: worker for key, worker in up.items() if key not in draining}


def draining_of(changes: Sequence[WorkerChange]) -> set[str]:
    """The keys draining after ``changes`` (still registered, no new requests)."""
    return _fold(changes)[1]
