"""The ``file`` discovery provider: parsing, change detection, and the router serving its fleet."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from turnout.discovery import DiscoveredWorker, Role, Snapshot
from turnout.plugins.discovery.file import FileProvider, parse_workers
from turnout.sim import SimProcess, get_records

from ..server.harness import MODEL, Router, run_router


def test_parse_accepts_a_list_a_mapping_and_bare_urls() -> None:
    text = b"""
workers:
  - {url: "grpc://10.0.0.1:30000", model: m, id: w1, labels: {zone: a}}
  - grpc://10.0.0.2:30000
  - {url: "grpc://10.0.0.3:30000", draining: true}
  - {url: "grpc://10.0.0.4:30000", role: prefill, bootstrap_port: 8998}
"""
    snapshot = parse_workers(text, ".yaml")
    assert snapshot.workers == (
        DiscoveredWorker("w1", "grpc://10.0.0.1:30000", "m", name="w1", labels={"zone": "a"}),
        DiscoveredWorker("grpc://10.0.0.2:30000", "grpc://10.0.0.2:30000"),
        DiscoveredWorker(
            "grpc://10.0.0.4:30000", "grpc://10.0.0.4:30000", role=Role.PREFILL, bootstrap_port=8998
        ),
    )
    assert snapshot.draining == {"grpc://10.0.0.3:30000"}
    as_json = json.dumps([{"url": "grpc://h:1"}]).encode()
    assert parse_workers(as_json, ".json") == Snapshot(
        (DiscoveredWorker("grpc://h:1", "grpc://h:1"),)
    )
    assert parse_workers(b"", ".yaml") == Snapshot(())


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        (b"[1, 2", ".json", "not valid JSON"),
        (b"workers: [", ".yaml", "not valid YAML"),
        (b"servers: []", ".yaml", "only have the key 'workers'"),
        (b"workers: 3", ".yaml", "expected a list"),
        (b"- {url: grpc://h:1, colour: red}", ".yaml", "unknown field `colour` - at `workers[0]`"),
        (b"- {url: grpc://h:1, role: leader}", ".yaml", "at `workers[0].role`"),
        (b"- grpc://h:1\n- grpc://h:1", ".yaml", "workers[1]: 'grpc://h:1' is listed twice"),
    ],
)
def test_parse_errors_say_what_is_wrong(text: bytes, suffix: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_workers(text, suffix)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="path"):
        FileProvider()
    with pytest.raises(ValueError, match="poll_interval_s"):
        FileProvider(path="x", poll_interval_s=0)
    assert "checked every 2s" in FileProvider(path="w.yaml", poll_interval_s=2).describe()


async def next_snapshot(stream: Any, within: float = 10.0) -> Snapshot:
    change = await asyncio.wait_for(anext(stream), within)
    assert isinstance(change, Snapshot)
    return change


async def test_rewrites_are_seen_and_bad_or_missing_files_change_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "workers.yaml"
    path.write_text("- grpc://h:1\n")
    provider = FileProvider(path=str(path), poll_interval_s=0.02, reread_interval_s=0.3)
    stream = provider.watch()
    try:
        assert [w.url for w in (await next_snapshot(stream)).workers] == ["grpc://h:1"]
        path.write_text("- grpc://h:1\n- grpc://h:2\n")
        assert len((await next_snapshot(stream)).workers) == 2
        # Same size and modification time, other content: found by the periodic re-read.
        stat = path.stat()
        path.write_text("- grpc://h:1\n- grpc://h:3\n")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert [w.url for w in (await next_snapshot(stream)).workers][1] == "grpc://h:3"
        with caplog.at_level(logging.WARNING, logger="turnout.plugins.discovery.file"):
            path.write_text("- {url: grpc://h:1, colour: red}\n")
            nothing = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.5)
            path.unlink()
            await asyncio.sleep(0.2)
            assert not nothing.done()  # neither the bad content nor the missing file
            path.write_text("- grpc://h:4\n")
            change = await asyncio.wait_for(nothing, 10)
        assert isinstance(change, Snapshot)
        assert [w.url for w in change.workers] == ["grpc://h:4"]
        assert caplog.text.count("colour") == 1  # logged once, not once per poll
        assert "is missing" in caplog.text
    finally:
        await stream.aclose()


async def test_an_unreadable_file_keeps_the_workers_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file that cannot be read is not an empty file (that would drain every worker): no
    snapshot until it reads again, and one warning per change of state, not one per poll."""
    path = tmp_path / "workers.yaml"
    path.write_text("- grpc://h:1\n")
    provider = FileProvider(path=str(path), poll_interval_s=0.02, reread_interval_s=0.1)
    stream = provider.watch()
    try:
        assert [w.url for w in (await next_snapshot(stream)).workers] == ["grpc://h:1"]
        with caplog.at_level(logging.WARNING, logger="turnout.plugins.discovery.file"):
            path.unlink()
            path.mkdir()  # stat works, reading fails (root reads any file whatever its mode)
            nothing = asyncio.ensure_future(anext(stream))
            await asyncio.sleep(0.6)  # some 30 polls and several periodic re-reads
            assert not nothing.done()
            assert caplog.text.count("cannot be read") == 1
            path.rmdir()
            await asyncio.sleep(0.2)
            path.mkdir()  # unreadable again after being missing: a new state, logged again
            await asyncio.sleep(0.3)
            assert not nothing.done()
            assert caplog.text.count("cannot be read") == 2
            assert caplog.text.count("is missing") == 1
            path.rmdir()
            path.write_text("- grpc://h:1\n- grpc://h:2\n")
            change = await asyncio.wait_for(nothing, 10)
        assert isinstance(change, Snapshot)
        assert [w.url for w in change.workers] == ["grpc://h:1", "grpc://h:2"]
    finally:
        await stream.aclose()


@pytest.fixture(scope="module")
def sims() -> Iterator[list[SimProcess]]:
    started = [
        SimProcess("--served-model-name", MODEL, "--delay-ms", "2").start() for _ in range(2)
    ]
    try:
        yield started
    finally:
        for sim in started:
            sim.stop()


def chat(router: Router, request_id: str) -> None:
    reply = httpx.post(
        f"{router.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        headers={"x-request-id": request_id},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text


def received(sim: SimProcess, prefix: str) -> int:
    records = asyncio.run(get_records(sim.url))
    return sum(rid.startswith(prefix) for rid in records["requests"])


def worker_states(router: Router) -> dict[str, str]:
    listing = httpx.get(f"{router.base_url}/workers", timeout=10).json()["workers"]
    return {w["id"]: w["state"] for w in listing}


def test_the_router_serves_the_workers_the_file_lists(
    tmp_path: Path, sims: list[SimProcess]
) -> None:
    path = tmp_path / "workers.yaml"

    def write(entries: list[dict[str, Any]]) -> None:
        path.with_suffix(".tmp").write_text(yaml.safe_dump({"workers": entries}))
        path.with_suffix(".tmp").replace(path)  # atomically, as Consul-template does

    a = {"url": sims[0].url, "model": MODEL, "id": "sim-a"}
    b = {"url": sims[1].url, "model": MODEL, "id": "sim-b"}
    write([a, b])
    config = {
        "discovery": [
            {"provider": "file", "options": {"path": str(path), "poll_interval_s": 0.05}}
        ],
        "defaults": {"policy": "round_robin"},
    }
    with run_router(config, sims=0) as router:
        router.wait_until(lambda: worker_states(router) == {"sim-a": "ready", "sim-b": "ready"})
        for n in range(6):
            chat(router, f"both-{n}")
        assert received(sims[0], "both-") == 3
        assert received(sims[1], "both-") == 3

        write([a, {**b, "draining": True}])
        router.wait_until(lambda: worker_states(router)["sim-b"] == "draining")
        for n in range(4):
            chat(router, f"held-{n}")
        assert received(sims[1], "held-") == 0

        write([b])
        router.wait_until(lambda: worker_states(router) == {"sim-b": "ready"})
        for n in range(4):
            chat(router, f"swapped-{n}")
        assert (received(sims[0], "swapped-"), received(sims[1], "swapped-")) == (0, 4)


def test_a_reload_switches_the_file_and_keeps_the_workers_both_list(
    tmp_path: Path, sims: list[SimProcess]
) -> None:
    a = {"url": sims[0].url, "model": MODEL, "id": "sim-a"}
    b = {"url": sims[1].url, "model": MODEL, "id": "sim-b"}
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text(yaml.safe_dump([a, b]))
    second.write_text(yaml.safe_dump([b]))
    wanted = {"path": str(first)}

    def edit(data: dict[str, Any]) -> dict[str, Any]:
        data["discovery"][0]["options"]["path"] = wanted["path"]
        return data

    config = {"discovery": [{"provider": "file", "options": {"path": "", "poll_interval_s": 0.05}}]}
    with run_router(edit(config), sims=0, reload_data=edit) as router:
        router.wait_until(lambda: worker_states(router) == {"sim-a": "ready", "sim-b": "ready"})
        for n in range(4):
            chat(router, f"before-{n}")
        served_by_b = httpx.get(f"{router.base_url}/workers/sim-b").json()["requests_total"]
        assert served_by_b == 2
        wanted["path"] = str(second)
        answer = httpx.post(f"{router.base_url}/admin/reload", timeout=10).json()
        assert answer["discovery_started"] == answer["discovery_stopped"] == ["discovery[0] (file)"]
        router.wait_until(lambda: worker_states(router) == {"sim-b": "ready"})
        # The same worker object carried over: its counters went on.
        assert httpx.get(f"{router.base_url}/workers/sim-b").json()["requests_total"] == 2
        chat(router, "after-0")
        assert received(sims[1], "after-") == 1
        unchanged = httpx.post(f"{router.base_url}/admin/reload", timeout=10).json()
        assert "discovery_started" not in unchanged
