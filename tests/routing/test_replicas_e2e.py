"""Several routers in front of one fleet: real ``turnout serve`` processes (one of them with two
serving processes, each router with its own ``PYTHONHASHSEED``) and real simulated workers.

- ``prefix_hash`` and ``consistent_hashing`` agree across routers with no shared state, whatever
  the order of the workers in each router's config; while one router knows a worker the other
  does not know yet, only the keys that router gives the new worker differ, and once both know
  it they agree again.
- Load-aware policies see the load other routers put on a worker (polled ``GetLoads``), so a
  router keeps new requests off a worker another router just filled.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bench import procfs
from tests.ops.helpers import Serve
from tests.server.harness import MODEL
from tests.support import wait_for
from turnout.sim import SimProcess

pytestmark = pytest.mark.slow

#: Each simulated worker answers ``w<index> <the user's text>``.
_TAG = re.compile(r"^w(\d+)\b")
KEYS = 48


def start_sims(tmp: Path, count: int, *flags: str) -> list[SimProcess]:
    sims = []
    for index in range(count):
        script = tmp / f"sim-{index}.json"
        script.write_text(json.dumps({"rules": [{"match": "", "reply": f"w{index} {{user}}"}]}))
        sims.append(SimProcess("--script", str(script), "--served-model-name", MODEL, *flags))
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(SimProcess.start, sims))
    return sims


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SimProcess]]:
    """Four simulated workers shared by the module's tests."""
    sims = start_sims(tmp_path_factory.mktemp("fleet"), 4, "--delay-ms", "2")
    yield sims
    for sim in sims:
        sim.stop()


@pytest.fixture
def routers(tmp_path: Path) -> Iterator[Callable[..., Serve]]:
    """Start ``turnout serve`` processes: ``routers(name, config=…, env=…)``; killed at the end."""
    started: list[Serve] = []

    def start(name: str, **kwargs: Any) -> Serve:
        serve = Serve(tmp_path / name, "", **kwargs)
        started.append(serve)
        return serve

    yield start
    for serve in started:
        serve.close()


def worker_of(router: Serve, text: str, key: str | None = None) -> int:
    """The index of the worker that answered ``text`` through ``router``."""
    headers = {"x-routing-key": key} if key else {}
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    deadline = time.monotonic() + 30
    while True:
        reply = httpx.post(
            f"{router.base_url}/v1/chat/completions", json=body, headers=headers, timeout=30
        )
        # 503: a serving process that has just started and has no ready worker yet
        if reply.status_code != 503 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert reply.status_code == 200, reply.text
    content = reply.json()["choices"][0]["message"]["content"]
    match = _TAG.match(content)
    assert match, content
    return int(match.group(1))


def placements(router: Serve, policy: str, sends: int = 1, strict: bool = True) -> dict[int, int]:
    """Key number -> worker index for every key (each sent ``sends`` times, on new
    connections; they must all agree, else the key maps to -1 when not ``strict``)."""

    def one(i: int) -> int:
        if policy == "prefix_hash":
            text, key = f"conversation {i}: tell me about topic {i * 7919}", None
        else:
            text, key = "the same prompt for every key", f"session-{i}"
        seen = {worker_of(router, text, key) for _ in range(sends)}
        assert len(seen) == 1 or not strict, (i, seen)
        return seen.pop() if len(seen) == 1 else -1

    with ThreadPoolExecutor(4) as pool:
        return dict(enumerate(pool.map(one, range(KEYS))))


def serving_processes(router: Serve, worker_ports: list[int]) -> int:
    """How many processes of ``router`` are connected to every one of ``worker_ports``."""
    counts = [
        procfs.connections_by_pid([pid], remote_ports=[port])
        for pid in procfs.tree_pids(router.proc.pid)
        for port in worker_ports
    ]
    connected = Counter(pid for count in counts for pid, n in count.items() if n)
    return sum(1 for n in connected.values() if n == len(worker_ports))


def worker_states(router: Serve) -> dict[str, str]:
    reply = httpx.get(f"{router.base_url}/workers", timeout=10)
    assert reply.status_code == 200, reply.text
    return {w["url"]: w["state"] for w in reply.json()["workers"]}


def write_workers(path: Path, urls: list[str]) -> None:
    """Write a ``file`` discovery list atomically (a rename, as the docs ask)."""
    part = path.with_suffix(".part")
    part.write_text(yaml.safe_dump({"workers": [{"url": u, "model": MODEL} for u in urls]}))
    part.replace(path)


@pytest.mark.parametrize("policy", ["prefix_hash", "consistent_hashing"])
def test_hash_policies_agree_across_routers_and_only_the_new_workers_keys_move(
    fleet: list[SimProcess], routers: Callable[..., Serve], tmp_path: Path, policy: str
) -> None:
    urls = [sim.url for sim in fleet]
    files = {name: tmp_path / f"{name}-workers.yaml" for name in ("a", "b")}
    for path in files.values():
        write_workers(path, [])

    def config(name: str, order: list[int]) -> dict[str, Any]:
        return {
            "workers": [{"url": urls[i], "model": MODEL} for i in order],
            "discovery": [
                {"provider": "file", "options": {"path": str(files[name]), "poll_interval_s": 0.1}}
            ],
            "defaults": {"policy": policy},
        }

    # The same three workers listed in another order; B serves with two processes; each
    # router hashes strings with its own seed.
    a = routers("a", config=config("a", [0, 1, 2]), env={"PYTHONHASHSEED": "1"})
    b = routers(
        "b", server={"processes": 2}, config=config("b", [2, 0, 1]), env={"PYTHONHASHSEED": "2"}
    )
    a.wait_ready()
    b.wait_ready()
    # /readiness answered by one process of B says nothing of the other: wait until both are
    # connected to the three workers and answer alike.
    ports = [sim.port for sim in fleet[:3]]
    wait_for(lambda: serving_processes(b, ports) == 2, "both processes of B to start")
    before = placements(a, policy)
    assert set(before.values()) == {0, 1, 2}
    wait_for(lambda: placements(b, policy, sends=2, strict=False) == before, "B to agree")
    assert placements(b, policy, sends=2) == before

    # A learns of worker 3, B not yet: only the keys A now gives worker 3 differ.
    write_workers(files["a"], [urls[3]])
    wait_for(lambda: worker_states(a).get(urls[3]) == "ready", "A to take worker 3")
    a_new, b_old = placements(a, policy), placements(b, policy, sends=2)
    assert b_old == before
    moved = {k for k, w in a_new.items() if w != before[k]}
    assert moved, "no key moved to the new worker"
    assert all(a_new[k] == 3 for k in moved)  # keys move only to the new worker
    assert len(moved) < KEYS / 2  # about a quarter of them
    assert {k for k in a_new if a_new[k] != b_old[k]} == moved

    # B learns of it too (each of its processes on its own: they may disagree meanwhile); then
    # the routers agree again, on A's new placement.
    write_workers(files["b"], [urls[3]])
    wait_for(lambda: placements(b, policy, sends=2, strict=False) == a_new, "B to agree")
    assert placements(b, policy, sends=2) == a_new
    assert placements(a, policy) == a_new


def test_a_router_keeps_off_a_worker_another_router_filled(
    routers: Callable[..., Serve], tmp_path: Path
) -> None:
    """Router A sends a burst of long requests to one worker; routers B (several policies) see
    it through GetLoads and send nothing there. A router that does not poll loads sends half."""
    sims = start_sims(tmp_path, 2, "--delay-ms", "5")
    try:
        run_burst_case(routers, [sim.url for sim in sims])
    finally:
        for sim in sims:
            sim.stop()


BURST = 6
POLICIES: dict[str, Any] = {
    "least_load": "least_load",
    "power_of_two": "power_of_two",
    # Small balance thresholds: a burst of six is an overload worth giving up affinity for.
    "cache_aware": {"name": "cache_aware", "params": {"balance_abs_threshold": 2}},
    "prefix_hash": {"name": "prefix_hash", "params": {"balance_abs_threshold": 2}},
}


def run_burst_case(routers: Callable[..., Serve], urls: list[str]) -> None:
    def config(policy: Any, load_monitor: dict[str, Any]) -> dict[str, Any]:
        return {
            "workers": [{"url": u, "model": MODEL} for u in urls],
            "defaults": {"policy": policy},
            "load_monitor": load_monitor,
        }

    fast = {"interval_s": 0.1}
    a = routers("a", config=config("consistent_hashing", fast))
    bs = {name: routers(name, config=config(policy, fast)) for name, policy in POLICIES.items()}
    blind = routers("blind", config=config("least_load", {"enabled": False}))
    for router in [a, *bs.values(), blind]:
        router.wait_ready()

    # Before the burst, B's cache_aware learns a long prompt on each worker (a new prompt goes
    # where it hashes to: learn prompts until both workers hold one).
    def history(v: int) -> str:
        return " ".join(f"fact {i} of story {v}" for i in range(60))

    learned: dict[int, int] = {}
    for v in range(16):
        learned.setdefault(worker_of(bs["cache_aware"], history(v)), v)
        if len(learned) == 2:
            break
    assert set(learned) == {0, 1}

    with ExitStack() as streams:
        busy = open_burst(streams, a)
        idle = 1 - busy
        for name, router in bs.items():
            wait_for(
                lambda r=router: reported_load(r, urls[busy]) >= BURST, f"{name} to see the burst"
            )
        for name, router in bs.items():
            chosen = [worker_of(router, f"new prompt {i} for {name}") for i in range(BURST)]
            assert chosen == [idle] * BURST, (name, chosen)
        # cache_aware gives up the affinity of a prompt it placed on the busy worker.
        assert worker_of(bs["cache_aware"], history(learned[busy]) + " and more") == idle
        # Without load polling a router counts only its own requests: ties go in turn.
        assert reported_load(blind, urls[busy]) == 0
        chosen = [worker_of(blind, f"new prompt {i} for blind") for i in range(BURST)]
        assert chosen.count(busy) == BURST // 2, chosen


def open_burst(streams: ExitStack, router: Serve) -> int:
    """Open ``BURST`` long streams with one routing key; returns the worker they all went to.

    The streams stay open until ``streams`` closes (their line iterators are kept there too:
    dropping one would close its connection, and the router would cancel the request).
    """
    client = streams.enter_context(httpx.Client(timeout=60))
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "a long answer"}],
        "max_tokens": 8000,  # 40 s at 5 ms per token: outlasts the checks (closed after them)
        "ignore_eos": True,
        "stream": True,
    }
    workers = set()
    for _ in range(BURST):
        response = streams.enter_context(
            client.stream(
                "POST",
                f"{router.base_url}/v1/chat/completions",
                json=body,
                headers={"x-routing-key": "burst"},
            )
        )
        assert response.status_code == 200
        text = ""
        lines = response.iter_lines()
        streams.callback(lines.close)
        while " " not in text:  # the answer starts with the worker's tag and a space
            line = next(lines)
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    text += choice["delta"].get("content") or ""
        match = _TAG.match(text)
        assert match, text
        workers.add(int(match.group(1)))
    assert len(workers) == 1, workers
    return workers.pop()


def reported_load(router: Serve, url: str) -> int:
    reply = httpx.get(f"{router.base_url}/workers", timeout=10)
    return next(int(w["load"]) for w in reply.json()["workers"] if w["url"] == url)
