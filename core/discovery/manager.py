"""Run the configured discovery providers and apply their changes to the worker registry.

One supervised task per ``discovery`` entry iterates the provider's ``watch()``; a provider that
raises (or stops) is logged and started again after an exponential back-off, and never takes the
router down. Changes go to the registry through its public API only. A worker this module added
belongs to its entry: only that entry's changes drain or remove it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from turnout.config import DiscoveryConfig
from turnout.discovery.types import (
    Added,
    DiscoveredWorker,
    DiscoveryProvider,
    Draining,
    Removed,
    Role,
    Snapshot,
    WorkerChange,
)
from turnout.errors import ConfigError, PluginError, StartupError
from turnout.plugin_registry import Registry
from turnout.wire import parse_worker_url
from turnout.workers.errors import WorkerConflict
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import WorkerSpec
from turnout.workers.worker import Worker

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Restart delays of a failed provider: ``initial`` doubling up to ``maximum`` (±20 %
    jitter); a run that lasted ``healthy_after_s`` starts again from ``initial``."""

    initial_s: float = 0.5
    maximum_s: float = 30.0
    healthy_after_s: float = 60.0


def entry_label(index: int, entry: DiscoveryConfig) -> str:
    """``discovery[0] (kubernetes)``: how logs and errors name an entry."""
    return f"discovery[{index}] ({entry.provider})"


def create_provider(
    registry: Registry[DiscoveryProvider], entry: DiscoveryConfig, label: str
) -> DiscoveryProvider:
    """The provider of one config entry; bad names or options are a :class:`ConfigError`."""
    try:
        factory = registry.factory(entry.provider)
    except PluginError as exc:
        raise PluginError(f"{label}: {exc}") from None
    try:
        provider = factory(**entry.options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{label}: invalid options: {exc}") from None
    except StartupError as exc:
        raise type(exc)(f"{label}: {exc}") from None
    if not callable(getattr(provider, "watch", None)):
        raise PluginError(f"{label}: the provider has no watch() method")
    return provider


def describe_discovery(
    entries: Sequence[DiscoveryConfig], registry: Registry[DiscoveryProvider]
) -> list[str]:
    """Check every entry (creating its provider, without starting it) and describe it."""
    lines = []
    for index, entry in enumerate(entries):
        label = entry_label(index, entry)
        provider = create_provider(registry, entry, label)
        describe = getattr(provider, "describe", None)
        summary = describe() if callable(describe) else json.dumps(entry.options, sort_keys=True)
        lines.append(f"{label}: {summary}")
    return lines


def _identity(entry: DiscoveryConfig) -> str:
    return json.dumps(msgspec.to_builtins(entry), sort_keys=True, default=str)


@dataclass(slots=True)
class _Owned:
    worker: Worker
    seen: DiscoveredWorker


@dataclass(slots=True, eq=False)
class _Source:
    """One running discovery entry and the workers it owns, by provider key."""

    label: str
    identity: str
    provider_name: str
    provider: DiscoveryProvider
    owned: dict[str, _Owned] = field(default_factory=dict)
    #: Adds that conflict with a worker still registered (waiting for it to leave).
    pending: dict[str, DiscoveredWorker] = field(default_factory=dict)
    #: Keys already warned about (conflicts, unsupported roles, bad URLs): warn once each.
    warned: set[str] = field(default_factory=set)
    #: Set once the provider reported a first full snapshot.
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    restarts: int = 0
    last_error: str | None = None
    task: asyncio.Task[None] | None = None


class DiscoveryManager:
    """The discovery providers of the current configuration, applied to ``registry``."""

    def __init__(
        self,
        registry: WorkerRegistry,
        providers: Registry[DiscoveryProvider],
        *,
        backoff: Backoff | None = None,
        retry_interval_s: float = 1.0,
        adopt_grace_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.providers = providers
        self.backoff = backoff or Backoff()
        self.retry_interval_s = retry_interval_s
        self.adopt_grace_s = adopt_grace_s
        self._clock = clock
        self._sources: list[_Source] = []
        #: Workers of entries that a reload dropped, by URL: a new entry may take them over
        #: (same URL and model) until they are drained.
        self._orphans: dict[str, _Owned] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retrying = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, entries: Sequence[DiscoveryConfig]) -> None:
        """Create and start one provider per entry (bad entries raise before anything starts)."""
        for source in self._build(list(enumerate(entries))):
            self._launch(source)

    async def reconfigure(self, entries: Sequence[DiscoveryConfig]) -> dict[str, list[str]]:
        """Apply a reloaded ``discovery`` list: unchanged entries keep running; others stop or
        start. Workers of a stopped entry are drained, unless a started entry reports the same
        URL and model within ``adopt_grace_s`` (then it takes them over, with no gap)."""
        wanted = {_identity(entry): (index, entry) for index, entry in enumerate(entries)}
        keep = [s for s in self._sources if s.identity in wanted]
        kept = {s.identity for s in keep}
        fresh = self._build([pair for i, pair in wanted.items() if i not in kept])
        stopped = [s for s in self._sources if s.identity not in wanted]
        for source in keep:  # where it now stands in the list
            source.label = entry_label(*wanted[source.identity])
        for source in stopped:
            await self._cancel(source)
            for owned in source.owned.values():
                if self._still_registered(owned.worker):
                    self._orphans[owned.worker.url] = owned
        self._sources = keep
        for source in fresh:
            self._launch(source)
        if self._orphans:
            self._spawn(self._drain_orphans_later(fresh), "turnout-discovery-orphans")
        return {"started": [s.label for s in fresh], "stopped": [s.label for s in stopped]}

    async def stop(self) -> None:
        """Stop every provider; the workers stay with the registry (it stops next)."""
        self._retrying = False
        for source in self._sources:
            await self._cancel(source)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    def status(self) -> list[dict[str, Any]]:
        """Each entry's state, JSON-ready (for logs and debugging)."""
        return [
            {
                "entry": source.label,
                "synced": source.synced.is_set(),
                "workers": sorted(o.worker.id for o in source.owned.values()),
                "pending": sorted(source.pending),
                "restarts": source.restarts,
                "last_error": source.last_error,
            }
            for source in self._sources
        ]

    # -- running providers -----------------------------------------------------------------------

    def _build(self, entries: Sequence[tuple[int, DiscoveryConfig]]) -> list[_Source]:
        sources = []
        for index, entry in entries:
            label = entry_label(index, entry)
            provider = create_provider(self.providers, entry, label)
            name = self.providers.canonical(entry.provider)
            sources.append(_Source(label, _identity(entry), name, provider))
        return sources

    def _launch(self, source: _Source) -> None:
        if not self._retrying:
            self._retrying = True
            self._spawn(self._retry_pending(), "turnout-discovery-retry")
        self._sources.append(source)
        source.task = asyncio.get_running_loop().create_task(
            self._supervise(source), name=f"turnout-{source.label}"
        )

    def _spawn(self, coro: Any, name: str) -> None:
        task: asyncio.Task[Any] = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _cancel(source: _Source) -> None:
        if source.task is not None:
            source.task.cancel()
            await asyncio.gather(source.task, return_exceptions=True)
            source.task = None

    async def _supervise(self, source: _Source) -> None:
        delay = self.backoff.initial_s
        while True:
            started = self._clock()
            try:
                await self._consume(source)
                source.last_error = "watch() ended"
                log.warning("%s: the provider stopped; starting it again", source.label)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                source.last_error = f"{type(exc).__name__}: {exc}"
                log.error(
                    "%s: the provider failed (%s); starting it again in %.1fs",
                    source.label,
                    source.last_error,
                    delay,
                    exc_info=exc,
                )
            if self._clock() - started >= self.backoff.healthy_after_s:
                delay = self.backoff.initial_s
            source.restarts += 1
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.backoff.maximum_s)

    async def _consume(self, source: _Source) -> None:
        stream: AsyncIterator[WorkerChange] = source.provider.watch()
        try:
            async for change in stream:
                try:
                    await self._apply(source, change)
                except Exception:
                    log.exception("%s: could not apply %r", source.label, change)
        finally:
            aclose = getattr(stream, "aclose", None)
            if callable(aclose):
                with contextlib.suppress(Exception):
                    await aclose()

    # -- applying changes ------------------------------------------------------------------------

    async def _apply(self, source: _Source, change: object) -> None:
        if isinstance(change, Added):
            await self._add(source, change.worker)
        elif isinstance(change, Draining):
            self._hold(source, change.key)
        elif isinstance(change, Removed):
            self._remove(source, change.key)
        elif isinstance(change, Snapshot):
            seen: set[str] = set()
            for worker in change.workers:
                seen.add(worker.key)
                await self._add(source, worker)
            for key in change.draining:
                seen.add(key)
                self._hold(source, key)
            for key in [*source.owned, *source.pending]:
                if key not in seen:
                    self._remove(source, key)
            source.synced.set()
        else:
            log.warning("%s: ignored an unknown change %r", source.label, change)

    async def _add(self, source: _Source, seen: DiscoveredWorker) -> None:
        key = seen.key
        owned = source.owned.get(key)
        if owned is not None:
            if owned.seen == seen and self._still_registered(owned.worker):
                if owned.worker.draining:
                    self.registry.set_draining(owned.worker.id, False)
                return
            self._remove(source, key)  # it changed (address, model, …): replace it
        if not self._acceptable(source, seen):
            source.pending.pop(key, None)
            return
        orphan = self._orphans.get(seen.url)
        if orphan is not None and self._adoptable(orphan, seen):
            del self._orphans[seen.url]
            self.registry.set_draining(orphan.worker.id, False)
            source.owned[key] = _Owned(orphan.worker, seen)
            source.pending.pop(key, None)
            log.info("%s: took over worker %s", source.label, orphan.worker.id)
            return
        spec = WorkerSpec(
            url=seen.url,
            model=seen.model,
            id=seen.name,
            labels={"discovery": source.provider_name, **seen.labels},
            # A provider's "regular" is also "not marked": then the worker's own
            # disaggregation_mode decides.
            role=None if seen.role is Role.REGULAR else seen.role,
            bootstrap_port=seen.bootstrap_port if seen.role is Role.PREFILL else None,
        )
        try:
            worker = await self.registry.add(spec)
        except WorkerConflict as exc:
            source.pending[key] = seen
            if key not in source.warned:
                source.warned.add(key)
                log.warning(
                    "%s: worker %s waits until the registered one leaves: %s",
                    source.label,
                    seen.name or seen.url,
                    exc,
                )
            return
        source.pending.pop(key, None)
        source.warned.discard(key)
        source.owned[key] = _Owned(worker, seen)
        log.info(
            "%s: added worker %s (%s, model %s%s)",
            source.label,
            worker.id,
            worker.url,
            seen.model or "from the worker",
            "" if seen.role is Role.REGULAR else f", {seen.role.value}",
        )

    def _acceptable(self, source: _Source, seen: DiscoveredWorker) -> bool:
        try:
            parse_worker_url(seen.url)
        except ValueError as exc:
            problem = str(exc)
        else:
            return True
        if seen.key not in source.warned:
            source.warned.add(seen.key)
            log.warning("%s: worker %s: %s", source.label, seen.name or seen.url, problem)
        return False

    def _hold(self, source: _Source, key: str) -> None:
        source.pending.pop(key, None)
        owned = source.owned.get(key)
        if owned is not None and self._still_registered(owned.worker):
            if not owned.worker.draining:
                log.info("%s: worker %s is draining", source.label, owned.worker.id)
            self.registry.set_draining(owned.worker.id, True)

    def _remove(self, source: _Source, key: str) -> None:
        source.pending.pop(key, None)
        source.warned.discard(key)
        owned = source.owned.pop(key, None)
        if owned is not None and self._still_registered(owned.worker):
            log.info("%s: removing worker %s", source.label, owned.worker.id)
            self.registry.start_drain(owned.worker.id)

    def _still_registered(self, worker: Worker) -> bool:
        return self.registry.get(worker.id) is worker

    def _adoptable(self, orphan: _Owned, seen: DiscoveredWorker) -> bool:
        return (
            self._still_registered(orphan.worker)
            and orphan.seen.model == seen.model
            and orphan.seen.role == seen.role
            and orphan.seen.bootstrap_port == seen.bootstrap_port
            and (seen.name is None or seen.name == orphan.worker.id)
        )

    async def _retry_pending(self) -> None:
        while True:
            await asyncio.sleep(self.retry_interval_s)
            for source in list(self._sources):
                for seen in list(source.pending.values()):
                    if source.pending.get(seen.key) is seen:
                        try:
                            await self._add(source, seen)
                        except Exception:
                            log.exception("%s: could not add %s", source.label, seen.url)

    async def _drain_orphans_later(self, fresh: list[_Source]) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.adopt_grace_s):
                await asyncio.gather(*(source.synced.wait() for source in fresh))
        for url, orphan in list(self._orphans.items()):
            del self._orphans[url]
            if self._still_registered(orphan.worker):
                log.info("discovery: removing worker %s (its entry left the config)", url)
                self.registry.start_drain(orphan.worker.id)
