"""Routing on KV events against ``turnout sim`` workers over real sockets: the registry's index
follows the simulated engines' caches (stores, evictions, flushes), ``cache_aware`` sends a
prefix to the worker that holds it and the engine reports the hit; a hung and a stopped
(SIGSTOP) worker leave rotation within seconds at the default settings, the real router over
HTTP in front."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import msgspec
import pytest

from tests.server.harness import MODEL, run_router
from turnout.plugins.policies.cache_aware import CacheAwarePolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.kv import cached_tokens
from turnout.routing.types import RoutingRequest
from turnout.sim import SimKnobs, SimProcess, SimWorker, get_counters
from turnout.wire import WorkerClient
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import HealthSettings, WorkerSpec

from ._cands import Prefers
from ._load import closed_loop
from ._worker import make_request
from .conftest import fast_settings

BLOCK = 16
#: What a retried request may add to the bound: one normal answer from a healthy worker, with
#: room for a busy test machine.
RETRY_ALLOWANCE_S = 4.0
BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "a short answer please"}],
    "max_tokens": 8,
}


async def eventually(predicate: Callable[[], object], within: float) -> bool:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


def prompt(seed: int, blocks: int = 4) -> tuple[int, ...]:
    return tuple(1000 + seed * 100 + i for i in range(blocks * BLOCK))


async def run(dispatcher: Dispatcher, tokens: tuple[int, ...], rid: str) -> tuple[str, int]:
    """The worker that served ``tokens`` and the cached tokens it reported."""
    routing = RoutingRequest(model=MODEL, token_ids=tokens)
    session = await dispatcher.open_stream(MODEL, routing, make_request(rid, tokens), timeout=10)
    cached = 0
    async with session:
        async for response in session:
            if response.HasField("complete"):
                cached = response.complete.cached_tokens
    return session.worker.id, cached


@pytest.fixture
async def sims() -> AsyncIterator[Callable[..., Any]]:
    started: list[SimWorker] = []

    async def make(
        n: int, *, events: bool = True, **knobs: Any
    ) -> tuple[list[SimWorker], WorkerRegistry]:
        for _ in range(n):
            started.append(
                await SimWorker(port=0, served_model_name=MODEL, block_size=BLOCK, **knobs).start()
            )
        return started, await router_over([s.url for s in started], events=events)

    async def router_over(urls: list[str], *, events: bool = True) -> WorkerRegistry:
        """Another router's registry over ``urls`` (subscribed to their KV events unless not
        ``events``)."""
        settings = fast_settings([WorkerSpec(url=u) for u in urls])
        if not events:
            settings = msgspec.structs.replace(
                settings, health=msgspec.structs.replace(settings.health, kv_events=False)
            )
        registry = WorkerRegistry(settings)
        await registry.start()
        registries.append(registry)
        for worker in registry.all():
            assert await registry.wait_ready(worker.id, 10)
        if events:
            assert await eventually(lambda: all(w.kv_index is not None for w in registry.all()), 5)
        return registry

    make.router_over = router_over  # type: ignore[attr-defined]

    registries: list[WorkerRegistry] = []
    yield make
    for registry in registries:
        await registry.stop()
    for sim in started:
        await sim.stop()


async def test_cache_aware_follows_the_sims_caches(sims: Callable[..., Any]) -> None:
    _, registry = await sims(3)
    dispatcher = Dispatcher(registry, default_policy=CacheAwarePolicy)
    first, cached = await run(dispatcher, prompt(1), "a")
    assert cached == 0
    holder = registry.get(first)
    assert holder is not None
    routing = RoutingRequest(model=MODEL, token_ids=(*prompt(1), 7, 8, 9))
    assert await eventually(lambda: cached_tokens(routing, [holder]) == [4 * BLOCK], 5)
    # Every follow-up of the prefix goes where the engine holds it, and hits there.
    for i in range(4):
        served, cached = await run(dispatcher, (*prompt(1), 7, 8, 9, i), f"b{i}")
        assert served == first
        assert cached >= 4 * BLOCK - 1  # the last prompt token of a block may be recomputed


async def test_the_index_follows_evictions_and_flushes(sims: Callable[..., Any]) -> None:
    fleet, registry = await sims(1, kv_cache_tokens=6 * BLOCK)
    (worker,) = registry.all()
    dispatcher = Dispatcher(registry, default_policy=CacheAwarePolicy)
    one = RoutingRequest(model=MODEL, token_ids=prompt(1))
    two = RoutingRequest(model=MODEL, token_ids=prompt(2))
    await run(dispatcher, prompt(1), "one")
    assert await eventually(lambda: cached_tokens(one, [worker]) == [4 * BLOCK], 5)
    await run(dispatcher, prompt(2), "two")  # room for six blocks: the first prompt goes
    assert await eventually(lambda: cached_tokens(two, [worker]) == [4 * BLOCK], 5)
    one_left = cached_tokens(one, [worker])
    assert one_left is not None
    assert one_left[0] < 4 * BLOCK
    async with WorkerClient(fleet[0].url) as client:
        await client.flush_cache()
    assert await eventually(lambda: worker.kv_index is not None and not len(worker.kv_index), 5)


#: A system prompt of 8 blocks that every conversation below starts with.
SYSTEM = tuple(range(100, 100 + 8 * BLOCK))


def conversation(c: int, turn: int) -> tuple[int, ...]:
    """Turn ``turn`` of conversation ``c``: the system prompt, then two blocks per turn (each
    turn's prompt extends the one before)."""
    draw = random.Random(c)
    return SYSTEM + tuple(draw.randrange(300, 2990) for _ in range(2 * BLOCK * (turn + 1)))


async def test_replicas_on_kv_events_agree_where_new_conversations_go(
    sims: Callable[..., Any],
) -> None:
    """Two routers on the same sims' events, with different histories and their workers in a
    different order, send each new conversation on a system prompt both workers hold to the
    same worker (a tie of equally good workers is broken by the prompt, not by this router's
    turn or loads), and a conversation whose next turn goes through the other router before
    the engine reported the first one still finds its cache."""
    fleet, a = await sims(2)
    b = await sims.router_over([s.url for s in reversed(fleet)])
    for worker in a.all():  # the system prompt cached on both workers
        pinned = Dispatcher(a, default_policy=lambda w=worker.id: Prefers(w))
        await run(pinned, (*SYSTEM, *[1] * BLOCK), f"warm-{worker.id}")
    system = RoutingRequest(model=MODEL, token_ids=SYSTEM)
    for registry in (a, b):
        assert await eventually(
            lambda r=registry: cached_tokens(system, r.all()) == [len(SYSTEM)] * 2, 5
        )
    policy_a, policy_b = CacheAwarePolicy(), CacheAwarePolicy()
    for i in range(3):  # each router has routed other traffic before
        policy_a.select(RoutingRequest(model=MODEL, token_ids=prompt(i)), a.all())
    policy_b.select(RoutingRequest(model=MODEL, token_ids=prompt(9)), b.all())
    picks_a, picks_b = [], []
    for c in range(16):
        routing = RoutingRequest(model=MODEL, token_ids=conversation(c, 0))
        picks_a.append(policy_a.select(routing, a.all()).url)
        picks_b.append(policy_b.select(routing, b.all()).url)
    assert picks_a == picks_b
    assert set(picks_a) == {s.url for s in fleet}  # and they spread
    # Sent: turn 0 through one router, turn 1 at once through the other.
    via_a = Dispatcher(a, default_policy=CacheAwarePolicy)
    via_b = Dispatcher(b, default_policy=CacheAwarePolicy)
    for c in range(16, 24):
        first, _ = await run(via_a, conversation(c, 0), f"c{c}-t0")
        second, cached = await run(via_b, conversation(c, 1), f"c{c}-t1")
        assert second == first, c
        assert cached >= len(conversation(c, 0)) - BLOCK, c


async def test_cache_aware_without_events_stays_balanced_at_c32(
    sims: Callable[..., Any],
) -> None:
    """32 clients whose conversations share a system prompt, cache_aware on its own tree (no
    KV events): the balance rule moves conversations off a worker long before it holds all of
    them (a fixed gap of 64 requests was never reached, and every request piled on one)."""
    _, registry = await sims(2, events=False, knobs=SimKnobs(delay_ms=2))
    dispatcher = Dispatcher(registry, default_policy=CacheAwarePolicy)
    served: Counter[str] = Counter()

    async def client(c: int) -> None:
        for turn in range(5):
            worker, _ = await run(dispatcher, conversation(c, turn), f"c{c}-t{turn}")
            served[worker] += 1

    await asyncio.gather(*(client(c) for c in range(32)))
    assert all(w.kv_index is None for w in registry.all())  # on the tree, not on events
    mean = sum(served.values()) / 2
    assert len(served) == 2
    assert max(served.values()) <= 1.5 * mean, served


def worker_info(base_url: str, url: str) -> dict[str, Any]:
    workers = httpx.get(f"{base_url}/workers", timeout=5).json()["workers"]
    return next(w for w in workers if w["url"] == url)


def _defaults_config(**extra: Any) -> dict[str, Any]:
    """The shipped defaults for wedges, staleness and the first-response timeout (120 s)."""
    return {
        "server": {"request_timeout_s": 60},
        "defaults": {"policy": "round_robin"},
        **extra,
    }


def test_a_hung_sim_is_out_within_seconds_at_defaults() -> None:
    defaults = HealthSettings()
    with run_router(_defaults_config(), sims=3) as router:
        hung = router.sims[0]
        hung.knobs.update({"hang": True})
        result = asyncio.run(
            closed_loop(
                f"{router.base_url}/v1/chat/completions",
                BODY,
                clients=8,
                duration_s=8.0,
                timeout_s=60.0,
            )
        )
        print(f"one of 3 sims hung, defaults: {result.summary()}")
        assert not result.failures, result.summary()
        assert result.completions > 50, result.summary()
        assert result.worst_wait_s < defaults.wedge_after_s + RETRY_ALLOWANCE_S, result.summary()
        hung.knobs.update({"hang": False})


def test_a_stopped_sim_process_is_out_within_seconds_at_defaults() -> None:
    defaults = HealthSettings()
    with (
        SimProcess("--served-model-name", MODEL, "--delay-ms", "2") as good,
        SimProcess("--served-model-name", MODEL, "--delay-ms", "2") as stopped,
    ):
        workers = [{"url": sim.url, "model": MODEL} for sim in (good, stopped)]
        with run_router(_defaults_config(workers=workers), sims=0) as router:
            router.wait_until(lambda: worker_info(router.base_url, stopped.url)["kv_events"])
            assert stopped.proc is not None
            pid = stopped.proc.pid
            os.kill(pid, signal.SIGSTOP)
            try:
                result = asyncio.run(
                    closed_loop(
                        f"{router.base_url}/v1/chat/completions",
                        BODY,
                        clients=8,
                        duration_s=8.0,
                        timeout_s=60.0,
                    )
                )
            finally:
                os.kill(pid, signal.SIGCONT)
            print(f"one of 2 sims stopped, defaults: {result.summary()}")
            assert not result.failures, result.summary()
            limit = defaults.stale_after_s + RETRY_ALLOWANCE_S
            assert result.worst_wait_s < limit, result.summary()
            # It speaks again: back in rotation.
            router.wait_until(lambda: worker_info(router.base_url, stopped.url)["state"] == "ready")


def _stream_text(url: str, body: dict[str, Any], started: threading.Event) -> tuple[str, list[str]]:
    """The content and finish reasons of a streamed chat; ``started`` is set at its first
    content; an error event fails."""
    text, reasons = "", []
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
                if choice.get("finish_reason"):
                    reasons.append(choice["finish_reason"])
            if text:
                started.set()
    return text, reasons


def test_a_stream_on_a_stopped_sim_goes_on_elsewhere_at_defaults() -> None:
    """SIGSTOP the worker mid-answer: once its event stream goes stale the silent stream is
    cut and continued on the other worker, token for token, within the stale allowance."""
    defaults = HealthSettings()
    args = ("--served-model-name", MODEL, "--delay-ms", "20", "--context-answers")
    with SimProcess(*args) as first, SimProcess(*args) as second:
        workers = [{"url": sim.url, "model": MODEL} for sim in (first, second)]
        with run_router(_defaults_config(workers=workers), sims=0) as router:
            for sim in (first, second):
                router.wait_until(
                    lambda sim=sim: worker_info(router.base_url, sim.url)["kv_events"]
                )
            url = f"{router.base_url}/v1/chat/completions"
            body = {**BODY, "max_tokens": 120, "ignore_eos": True}
            reference = _stream_text(url, body, threading.Event())
            assert reference[1] == ["length"]
            with ThreadPoolExecutor(1) as pool:
                started = threading.Event()
                answer = pool.submit(_stream_text, url, body, started)
                assert started.wait(10)
                (serving,) = [
                    sim
                    for sim in (first, second)
                    if asyncio.run(get_counters(sim.url))["running"] > 0
                ]
                assert serving.proc is not None
                os.kill(serving.proc.pid, signal.SIGSTOP)
                stopped_at = time.monotonic()
                try:
                    got = answer.result(timeout=60)
                    waited = time.monotonic() - stopped_at
                finally:
                    os.kill(serving.proc.pid, signal.SIGCONT)
            assert got == reference
            # The rest of the answer (2.4 s of tokens at most) after the stale verdict.
            assert waited < defaults.stale_after_s + RETRY_ALLOWANCE_S + 2.4, waited
