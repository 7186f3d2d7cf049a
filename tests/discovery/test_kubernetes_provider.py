"""The ``kubernetes`` provider: the real kubernetes-asyncio client against a scripted API server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import eventually
from turnout.discovery import Added, DiscoveredWorker, Draining, Removed, Role, Snapshot
from turnout.discovery.types import WorkerChange
from turnout.plugins.discovery.kubernetes import KubernetesProvider

from .k8s_api import ScriptedApiServer


@pytest.fixture
async def api() -> AsyncIterator[ScriptedApiServer]:
    server = await ScriptedApiServer().start()
    yield server
    await server.stop()


class Collector:
    """Runs ``provider.watch()`` in a task and keeps every change."""

    def __init__(self, provider: KubernetesProvider) -> None:
        self.provider = provider
        self.changes: list[WorkerChange] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async for change in self.provider.watch():
            self.changes.append(change)

    def since(self, index: int) -> list[WorkerChange]:
        return self.changes[index:]

    def snapshots(self) -> list[Snapshot]:
        return [c for c in self.changes if isinstance(c, Snapshot)]


@pytest.fixture
async def watch(api: ScriptedApiServer, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    collectors: list[Collector] = []

    async def start(**options: Any) -> Collector:
        options.setdefault("kubeconfig", str(api.kubeconfig(tmp_path)))
        options.setdefault("selector", {"app": "sglang"})
        options.setdefault("backoff_initial_s", 0.05)
        options.setdefault("backoff_max_s", 0.2)
        collector = Collector(KubernetesProvider(**options))
        collector.task = asyncio.get_running_loop().create_task(collector._run())
        collectors.append(collector)
        await eventually(lambda: bool(collector.snapshots()), within=60)
        return collector

    yield start
    for collector in collectors:
        assert collector.task is not None
        collector.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await collector.task


def keys(changes: list[WorkerChange]) -> list[tuple[str, str]]:
    out = []
    for change in changes:
        if isinstance(change, Added):
            out.append(("added", change.worker.name or ""))
        elif isinstance(change, (Draining, Removed)):
            out.append((type(change).__name__.lower(), change.key))
    return out


def test_pod_to_worker() -> None:
    provider = KubernetesProvider(model_label="model", port=31000)
    pod: dict[str, Any] = {
        "metadata": {
            "name": "sglang-0",
            "namespace": "inference",
            "uid": "u1",
            "labels": {"model": "qwen3-8b", "turnout.io/role": "prefill"},
            "annotations": {"turnout.io/bootstrap-port": "8998", "turnout.io/model": "ignored"},
        },
        "status": {
            "phase": "Running",
            "podIP": "fd00::5",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    assert provider.pod_worker(pod) == (
        "u1",
        DiscoveredWorker(
            key="u1",
            url="grpc://[fd00::5]:31000",
            model="qwen3-8b",
            role=Role.PREFILL,
            name="sglang-0",
            labels={"pod": "sglang-0", "namespace": "inference"},
            bootstrap_port=8998,
        ),
    )
    pod["metadata"]["labels"] = {}
    pod["metadata"]["annotations"] = {"turnout.io/port": "30001", "turnout.io/model": "a/b"}
    _, worker = provider.pod_worker(pod)
    assert worker is not None
    assert (worker.url, worker.model, worker.role) == (
        "grpc://[fd00::5]:30001",
        "a/b",
        Role.REGULAR,
    )
    for bad_port in ("0", "65536", "http", ""):
        pod["metadata"]["annotations"]["turnout.io/port"] = bad_port
        _, worker = provider.pod_worker(pod)
        assert worker is not None
        assert worker.url == "grpc://[fd00::5]:31000", bad_port  # the default port instead
    for change in (
        {"status": {**pod["status"], "conditions": [{"type": "Ready", "status": "False"}]}},
        # The node stopped reporting (its kubelet is away): not known to be ready, so not ready.
        {"status": {**pod["status"], "conditions": [{"type": "Ready", "status": "Unknown"}]}},
        {"status": {**pod["status"], "conditions": [{"type": "Ready"}]}},
        {
            "status": {
                **pod["status"],
                "conditions": [{"type": "ContainersReady", "status": "True"}],
            }
        },
        {"status": {**pod["status"], "conditions": []}},
        {"status": {**pod["status"], "phase": "Pending"}},
        {"status": {**pod["status"], "podIP": None}},
        {"metadata": {**pod["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}},
        {"metadata": {**pod["metadata"], "labels": {"turnout.io/role": "leader"}}},
    ):
        assert provider.pod_worker({**pod, **change}) == ("u1", None), change


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="colour"):
        KubernetesProvider(colour="red")
    with pytest.raises(ValueError, match="port"):
        KubernetesProvider(port=0)
    described = KubernetesProvider(namespace="ns", selector={"b": "2", "a": "1"}).describe()
    assert "pods in namespace ns matching 'a=1,b=2'" in described


async def test_list_then_watch_adds_drains_and_removes_pods(
    api: ScriptedApiServer, watch: Callable[..., Any]
) -> None:
    api.add_pod("ready-0", port=31000)
    api.add_pod("starting-0", port=31001, ready=False)
    api.add_pod("other-app", port=31002, labels={"app": "web"})
    seen = await watch()
    (first,) = seen.snapshots()
    assert [w.name for w in first.workers] == ["ready-0"]
    assert first.workers[0].url == "grpc://127.0.0.1:31000"
    assert first.workers[0].labels == {"pod": "ready-0", "namespace": "inference"}
    assert len(first.draining) == 1
    list_query = api.requests[0][1]
    assert list_query["labelSelector"] == "app=sglang"
    await eventually(lambda: len(api.requests) == 2)
    kind, watch_query = api.requests[1]
    assert kind == "watch"
    assert watch_query["resourceVersion"] == str(api.version)
    assert watch_query["allowWatchBookmarks"] in ("true", "True")
    assert int(watch_query["timeoutSeconds"]) == 240

    mark = len(seen.changes)
    starting = api.pods[("inference", "starting-0")]["metadata"]["uid"]
    ready = api.pods[("inference", "ready-0")]["metadata"]["uid"]
    api.set_ready("starting-0", True)
    api.set_ready("ready-0", False)
    api.set_ready("ready-0", False)  # a status update that changes nothing: no change
    api.set_ready("ready-0", True)
    api.start_deleting("ready-0")
    api.delete_pod("ready-0")
    await eventually(lambda: len(seen.changes) - mark == 5)
    assert keys(seen.since(mark)) == [
        ("added", "starting-0"),
        ("draining", ready),
        ("added", "ready-0"),
        ("draining", ready),
        ("removed", ready),
    ]
    assert starting


async def test_relabelled_pods_come_and_go_and_a_new_model_replaces_the_worker(
    api: ScriptedApiServer, watch: Callable[..., Any]
) -> None:
    api.add_pod("w", port=31000, annotations={"turnout.io/model": "m1"})
    seen = await watch()
    uid = api.pods[("inference", "w")]["metadata"]["uid"]
    mark = len(seen.changes)
    api.relabel("w", {"app": "retired"})
    api.relabel("w", {"app": "sglang"})
    api.annotate("w", "turnout.io/model", "m2")
    await eventually(lambda: len(seen.changes) - mark == 3)
    removed, added, renamed = seen.since(mark)
    assert removed == Removed(uid)
    assert isinstance(added, Added)
    assert added.worker.model == "m1"
    assert isinstance(renamed, Added)
    assert renamed.worker.model == "m2"


async def test_a_dropped_watch_resumes_from_the_last_bookmark(
    api: ScriptedApiServer, watch: Callable[..., Any]
) -> None:
    api.add_pod("w", port=31000)
    seen = await watch()
    await eventually(lambda: len(api.watchers) == 1)
    api.add_pod("unrelated", labels={"app": "web"})  # moves the version on, invisible here
    api.bookmark()
    bookmarked = str(api.version)
    await asyncio.sleep(0.2)
    api.drop_watches()
    await eventually(lambda: len(api.requests) == 3)
    assert api.requests[2][0] == "watch"
    assert api.requests[2][1]["resourceVersion"] == bookmarked
    api.add_pod("after", port=31001)
    await eventually(lambda: keys(seen.changes)[-1:] == [("added", "after")])
    assert len(seen.snapshots()) == 1  # resumed, not re-listed


async def test_410_gone_and_the_periodic_resync_list_again(
    api: ScriptedApiServer, watch: Callable[..., Any]
) -> None:
    api.add_pod("a", port=31000)
    api.add_pod("b", port=31001)
    seen = await watch(resync_interval_s=1.5)
    await eventually(lambda: len(api.watchers) == 1)
    api.compact()
    api.drop_watches()
    await eventually(lambda: len(seen.snapshots()) == 2)
    assert [kind for kind, _ in api.requests[:4]] == ["list", "watch", "watch", "list"]
    # A pod that vanished without an event is gone from the next periodic re-list.
    api.delete_silently("a")
    await eventually(lambda: len(seen.snapshots()) == 3, within=15)
    assert [w.name for w in seen.snapshots()[-1].workers] == ["b"]


async def test_the_api_server_restarting_mid_watch(
    api: ScriptedApiServer, watch: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    api.add_pod("a", port=31000)
    seen = await watch()
    await eventually(lambda: len(api.requests) == 2)
    with caplog.at_level(logging.WARNING, logger="turnout.plugins.discovery.kubernetes"):
        restart = asyncio.ensure_future(api.restart(down_s=0.5))
        await asyncio.sleep(0.2)
        api.add_pod("while-down", port=31001)  # recorded while no one can connect
        await restart
        await eventually(lambda: ("added", "while-down") in keys(seen.changes))
    assert "pods watch failed" in caplog.text
    api.delete_pod("a")
    await eventually(lambda: keys(seen.changes)[-1][0] == "removed")


async def test_watch_timeouts_resume_without_a_list(
    api: ScriptedApiServer, watch: Callable[..., Any]
) -> None:
    api.add_pod("a", port=31000)
    await watch(watch_timeout_s=0.5)
    await eventually(lambda: len(api.requests) >= 4)
    assert [kind for kind, _ in api.requests[:4]] == ["list", "watch", "watch", "watch"]
    assert all(int(q["timeoutSeconds"]) == 1 for _, q in api.requests[1:4])


async def test_refused_credentials_are_logged_with_the_rbac_hint_and_retried(
    api: ScriptedApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = api.kubeconfig(tmp_path)
    config.write_text(config.read_text().replace("scripted-token", "wrong"))
    provider = KubernetesProvider(kubeconfig=str(config), backoff_initial_s=0.05, backoff_max_s=0.1)
    stream = provider.watch()
    with caplog.at_level(logging.WARNING, logger="turnout.plugins.discovery.kubernetes"):
        pending = asyncio.ensure_future(anext(stream))
        await eventually(lambda: caplog.text.count("401") >= 2)
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
    await stream.aclose()
    assert "needs get, list and watch on pods" in caplog.text
