"""Capacity from the engines over real sockets: with no fixed ceiling, the router admits as
many requests as the simulated engine's pushed load says it runs (``max_running_requests``),
so requests wait at the router, not on the engine (at most one, for the moment between the
router seeing a request end and the engine freeing its slot); raising the engine's limit
raises admission with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.ops.helpers import chat, scrape, value
from tests.server.harness import run_router
from tests.support import eventually

from .conftest import CHAT, admission, peak_running


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def test_capacity_follows_the_pushed_load(http: httpx.AsyncClient) -> None:
    config = {"admission": admission(engine_capacity=True)}
    sim_kwargs = {"delay_ms": 20.0, "max_running": 2}
    with run_router(config=config, sims=1, sim_kwargs=sim_kwargs) as router:
        sim = router.sims[0]
        url = f"{router.base_url}{CHAT}"
        body = chat(max_tokens=10)

        def capacity() -> float:
            return value(scrape(router.base_url), "turnout_admission_capacity")

        async def warm_until(wanted: float) -> None:
            async def pushed() -> bool:
                assert (await http.post(url, json=body)).status_code == 200
                return capacity() == wanted

            await eventually(pushed, what=f"a pushed capacity of {wanted}")

        await warm_until(2)
        async with peak_running(sim) as peak:
            answers = await asyncio.gather(*(http.post(url, json=body) for _ in range(8)))
            assert all(r.status_code == 200 for r in answers)
            assert sim.rank_stats[0]["peak_waiting"] <= 1  # the router held them, not the engine
            assert peak.take() == 2

            sim.knobs.update({"max_running": 4})
            await warm_until(4)
            peak.take()
            answers = await asyncio.gather(*(http.post(url, json=body) for _ in range(12)))
            assert all(r.status_code == 200 for r in answers)
            assert sim.rank_stats[0]["peak_waiting"] <= 1
            assert peak.take() == 4


async def test_a_full_kv_cache_stops_admission(http: httpx.AsyncClient) -> None:
    """Eight running slots but a small KV cache: the router stops admitting once the running
    requests fill ``kv_usage_limit`` of it (the evictable prefix cache left behind by earlier
    requests does not count, so admission goes on as it fills)."""
    config = {"admission": admission(engine_capacity=True, kv_usage_limit=0.5)}
    sim_kwargs = {"delay_ms": 20.0, "max_running": 8, "kv_cache_tokens": 4096}
    with run_router(config=config, sims=1, sim_kwargs=sim_kwargs) as router:
        sim = router.sims[0]
        url = f"{router.base_url}{CHAT}"

        def body(n: int) -> dict[str, object]:
            words = " ".join(f"w{n}x{i}" for i in range(170))  # unique: no prefix hits
            return chat(words, max_tokens=10)

        first = await http.post(url, json=body(0))
        assert first.status_code == 200
        share = first.json()["usage"]["prompt_tokens"] / 4096
        assert 0.1 < share < 0.25, share  # two or three fill half the cache
        async with peak_running(sim) as peak:
            for batch in range(3):  # the retained cache grows past the limit meanwhile
                answers = await asyncio.gather(
                    *(http.post(url, json=body(100 * (batch + 1) + n)) for n in range(8))
                )
                assert all(r.status_code == 200 for r in answers)
            assert 2 <= peak.take() <= 4


async def test_an_admitted_request_goes_to_the_engine_with_the_free_place(
    http: httpx.AsyncClient,
) -> None:
    """Two engines of one running slot each, round robin: a long request runs on one, a short
    one ran on the other; the next request goes to the free engine, not (its turn by round
    robin) to queue behind the long one."""
    config = {
        "admission": admission(engine_capacity=True),
        "defaults": {"policy": "round_robin"},
    }
    sim_kwargs = {"delay_ms": 20.0, "max_running": 1}
    with run_router(config=config, sims=2, sim_kwargs=sim_kwargs) as router:
        url = f"{router.base_url}{CHAT}"
        short = chat(max_tokens=2)

        async def pushed() -> bool:
            assert (await http.post(url, json=short)).status_code == 200
            return value(scrape(router.base_url), "turnout_admission_capacity") == 2

        await eventually(pushed, what="both engines' pushed loads")
        long = asyncio.create_task(http.post(url, json=chat(max_tokens=60)))  # ~1.2 s
        await eventually(lambda: sum(sim.running for sim in router.sims) == 1, what="long runs")
        assert (await http.post(url, json=short)).status_code == 200
        answer = await http.post(url, json=short)
        assert answer.status_code == 200
        assert not long.done()  # it did not wait for the long request's slot
        assert (await long).status_code == 200
