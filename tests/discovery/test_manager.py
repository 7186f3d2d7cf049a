"""The discovery manager: provider changes applied to a real registry of simulated workers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import eventually
from turnout.config import DiscoveryConfig
from turnout.discovery import (
    Added,
    DiscoveredWorker,
    Draining,
    Removed,
    Role,
    Snapshot,
    create_provider,
    describe_discovery,
)
from turnout.errors import ConfigError, PluginError
from turnout.plugin_loader import Plugins
from turnout.sim import SimWorker
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import WorkerSpec

from .conftest import provider

QUEUE = [{"provider": "queue"}]


def seen(sim: SimWorker, key: str | None = None, **fields: Any) -> DiscoveredWorker:
    return DiscoveredWorker(key=key or sim.url, url=sim.url, **fields)


def routable(registry: WorkerRegistry) -> set[str]:
    return {w.url for w in registry.all() if w.routable}


def urls(registry: WorkerRegistry) -> set[str]:
    return {w.url for w in registry.all()}


async def test_added_workers_become_routable_with_their_model(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    registry, _ = await fleet(QUEUE)
    source = provider()
    await source.queue.put(Added(seen(sims[0], name="pod-a", labels={"zone": "a"})))
    await source.queue.put(Added(seen(sims[1], model="pinned")))
    await eventually(lambda: routable(registry) == {sims[0].url, sims[1].url})
    first, second = registry.get("pod-a"), registry.all()[1]
    assert first is not None
    assert first.model_id == "sim-model"  # asked the worker (GetModelInfo)
    assert first.labels["zone"] == "a"
    assert first.labels["discovery"] == "queue"
    assert second.model_id == "pinned"
    await source.queue.put(Added(seen(sims[0], name="pod-a", labels={"zone": "a"})))
    await source.queue.put(Draining("never-seen"))
    await eventually(source.queue.empty)
    assert registry.get("pod-a") is first  # repeating an add changes nothing


async def test_draining_holds_a_worker_until_it_is_added_again(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    registry, _ = await fleet(QUEUE)
    source = provider()
    await source.queue.put(Added(seen(sims[0])))
    await eventually(lambda: routable(registry) == {sims[0].url})
    worker = registry.all()[0]
    await source.queue.put(Draining(sims[0].url))
    await eventually(lambda: worker.draining)
    assert not worker.routable
    assert registry.get(worker.id) is worker  # held, not removed
    await source.queue.put(Added(seen(sims[0])))
    await eventually(lambda: worker.routable)
    assert registry.get(worker.id) is worker
    # A pod that turns unready and is then deleted: held, then removed.
    await source.queue.put(Draining(sims[0].url))
    await source.queue.put(Removed(sims[0].url))
    await eventually(lambda: registry.get(worker.id) is None)


async def test_a_removed_worker_finishes_its_requests_before_it_leaves(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    registry, _ = await fleet(QUEUE)
    source = provider()
    await source.queue.put(Added(seen(sims[0])))
    await eventually(lambda: routable(registry) == {sims[0].url})
    worker = registry.all()[0]
    worker.acquire()  # a request in flight
    await source.queue.put(Removed(sims[0].url))
    await eventually(lambda: worker.draining)
    assert registry.get(worker.id) is worker
    worker.release()
    await eventually(lambda: registry.get(worker.id) is None)


async def test_a_snapshot_removes_what_it_does_not_list(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    registry, manager = await fleet(QUEUE)
    source = provider()
    await source.queue.put(Added(seen(sims[0])))
    await source.queue.put(Added(seen(sims[1])))
    await eventually(lambda: routable(registry) == {sims[0].url, sims[1].url})
    # A missed "removed" event: the next full snapshot no longer lists sims[0].
    await source.queue.put(Snapshot((seen(sims[1]), seen(sims[2])), frozenset()))
    await eventually(lambda: urls(registry) == {sims[1].url, sims[2].url})
    await eventually(lambda: routable(registry) == {sims[1].url, sims[2].url})
    await source.queue.put(Snapshot((seen(sims[2]),), frozenset({sims[1].url})))
    await eventually(lambda: routable(registry) == {sims[2].url})
    assert urls(registry) == {sims[1].url, sims[2].url}  # sims[1] held as draining
    assert manager.status()[0]["synced"] is True


async def test_a_changed_worker_is_replaced(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    registry, _ = await fleet(QUEUE)
    source = provider()
    await source.queue.put(Added(seen(sims[0], key="pod", model="old")))
    await eventually(lambda: routable(registry) == {sims[0].url})
    old = registry.all()[0]
    old.acquire()
    await source.queue.put(Added(seen(sims[0], key="pod", model="new")))
    await eventually(lambda: old.draining)
    assert registry.models() == ["old"]  # the new one waits for the old one's request
    old.release()
    await eventually(lambda: registry.models(ready_only=True) == ["new"])
    assert registry.get(old.id) is not old


async def test_a_worker_that_is_also_static_waits_for_the_static_one_to_leave(
    fleet: Callable[..., Any], sims: list[SimWorker], caplog: pytest.LogCaptureFixture
) -> None:
    registry, manager = await fleet(QUEUE, static=[WorkerSpec(url=sims[0].url)])
    source = provider()
    with caplog.at_level(logging.WARNING, logger="turnout.discovery"):
        await source.queue.put(Added(seen(sims[0], name="dup")))
        await eventually(lambda: manager.status()[0]["pending"] == [sims[0].url])
        await asyncio.sleep(0.3)  # several retries (every 0.05 s), one warning
    assert sum("waits until the registered one leaves" in r.message for r in caplog.records) == 1
    assert registry.get("dup") is None
    await registry.remove(registry.all()[0].id)
    await eventually(lambda: registry.get("dup") is not None and registry.get("dup").routable)


@pytest.mark.parametrize("gone", ["unlisted", "draining"])
async def test_a_waiting_worker_the_provider_drops_is_not_added_later(
    fleet: Callable[..., Any], sims: list[SimWorker], gone: str
) -> None:
    """A worker waiting for a static one to leave, then left out of a snapshot (or reported
    draining), stops waiting: it is not added when the static one goes."""
    registry, manager = await fleet(QUEUE, static=[WorkerSpec(url=sims[0].url)])
    source = provider()
    await source.queue.put(Added(seen(sims[0], name="dup")))
    await eventually(lambda: manager.status()[0]["pending"] == [sims[0].url])
    if gone == "unlisted":
        await source.queue.put(Snapshot((seen(sims[1]),)))
    else:
        await source.queue.put(Draining(sims[0].url))
    await eventually(lambda: manager.status()[0]["pending"] == [])
    await registry.remove(registry.all()[0].id)
    await asyncio.sleep(0.3)  # several retries (every 0.05 s)
    assert registry.get("dup") is None


async def test_a_crashing_provider_is_restarted_and_its_snapshot_reconciles(
    fleet: Callable[..., Any], sims: list[SimWorker], caplog: pytest.LogCaptureFixture
) -> None:
    registry, manager = await fleet(QUEUE)
    source = provider()
    await source.queue.put(Added(seen(sims[0])))
    await eventually(lambda: routable(registry) == {sims[0].url})
    with caplog.at_level(logging.ERROR, logger="turnout.discovery"):
        await source.queue.put(RuntimeError("API went away"))
        await eventually(lambda: source.watches == 2)
    assert source.closed == 1
    assert "API went away" in caplog.text
    assert manager.status()[0]["restarts"] == 1
    assert routable(registry) == {sims[0].url}  # workers stay while the provider restarts
    await source.queue.put(Snapshot((seen(sims[1]),)))
    await eventually(lambda: urls(registry) == {sims[1].url})
    await source.queue.put(Added(seen(sims[2])))
    await eventually(lambda: sims[2].url in routable(registry))


async def test_prefill_and_decode_workers_join_with_their_role(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    registry, _ = await fleet(QUEUE)
    source = provider()
    await source.queue.put(Added(seen(sims[0], role=Role.PREFILL, bootstrap_port=9100)))
    await source.queue.put(Added(seen(sims[1], role=Role.DECODE)))
    await source.queue.put(Added(seen(sims[2])))
    await eventually(lambda: routable(registry) == {s.url for s in sims[:3]})
    prefill, decode, regular = (registry.get(s.url.removeprefix("grpc://")) for s in sims[:3])
    assert prefill.role is Role.PREFILL
    assert prefill.bootstrap_port == 9100
    assert decode.role is Role.DECODE
    assert regular.role is Role.REGULAR  # unmarked, and the worker says it is regular
    assert registry.disaggregated == {"sim-model"}
    assert registry.readiness_problem("sim-model") is None


async def test_bad_entries_fail_before_anything_starts(plugins: Plugins) -> None:
    with pytest.raises(PluginError, match=r"discovery\[0\] \(nope\): unknown discovery provider"):
        describe_discovery([DiscoveryConfig(provider="nope")], plugins.discovery)
    with pytest.raises(ConfigError, match=r"discovery\[1\] \(queue\): invalid options: unknown"):
        describe_discovery(
            [DiscoveryConfig(provider="queue"), DiscoveryConfig("queue", {"colour": "red"})],
            plugins.discovery,
        )
    lines = describe_discovery(
        [DiscoveryConfig(provider="queue", options={"channel": "x"})], plugins.discovery
    )
    assert lines == ["discovery[0] (queue): queue x"]
    made = create_provider(plugins.discovery, DiscoveryConfig("queue"), "label")
    assert made.describe() == "queue a"  # type: ignore[attr-defined]


async def test_reload_keeps_unchanged_entries_and_hands_workers_over(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    entries = [{"provider": "queue", "options": {"channel": "a"}}]
    registry, manager = await fleet(entries, adopt_grace_s=5.0)
    first = provider("a")
    await first.queue.put(Added(seen(sims[0], name="w0")))
    await eventually(lambda: routable(registry) == {sims[0].url})
    worker = registry.all()[0]

    unchanged = await manager.reconfigure([DiscoveryConfig("queue", {"channel": "a"})])
    assert unchanged == {"started": [], "stopped": []}
    assert first.closed == 0

    changed = await manager.reconfigure([DiscoveryConfig("queue", {"channel": "b"})])
    assert changed == {"started": ["discovery[0] (queue)"], "stopped": ["discovery[0] (queue)"]}
    assert first.closed == 1
    second = provider("b")
    # The new entry reports the same worker: it takes it over, no gap, no new connection.
    await second.queue.put(Snapshot((seen(sims[0], name="w0"), seen(sims[1]))))
    await eventually(lambda: routable(registry) == {sims[0].url, sims[1].url})
    assert registry.get("w0") is worker
    assert not worker.draining

    await manager.reconfigure([])
    assert second.closed == 1
    await eventually(lambda: registry.all() == [])


async def test_reload_does_not_hand_a_worker_over_to_an_entry_with_another_model(
    fleet: Callable[..., Any], sims: list[SimWorker]
) -> None:
    registry, manager = await fleet(
        [{"provider": "queue", "options": {"channel": "a"}}], adopt_grace_s=5.0
    )
    await provider("a").queue.put(Added(seen(sims[0], name="w0", model="old")))
    await eventually(lambda: routable(registry) == {sims[0].url})
    worker = registry.all()[0]
    await manager.reconfigure([DiscoveryConfig("queue", {"channel": "b"})])
    await provider("b").queue.put(Snapshot((seen(sims[0], name="w0", model="new"),)))
    # The old worker drains once the new entry is synced; the new one then takes its place.
    await eventually(lambda: registry.models(ready_only=True) == ["new"])
    assert registry.get("w0") is not worker


async def test_reload_names_entries_by_their_new_place(fleet: Callable[..., Any]) -> None:
    _, manager = await fleet([{"provider": "queue", "options": {"channel": "a"}}])
    changes = await manager.reconfigure(
        [DiscoveryConfig("queue", {"channel": "new"}), DiscoveryConfig("queue", {"channel": "a"})]
    )
    assert changes == {"started": ["discovery[0] (queue)"], "stopped": []}
    assert provider("a").closed == 0
    assert sorted(s["entry"] for s in manager.status()) == [
        "discovery[0] (queue)",
        "discovery[1] (queue)",
    ]
    assert manager.status()[0]["entry"] == "discovery[1] (queue)"  # the kept one moved down
