"""Priority classes over real sockets: class order and reserved shares under contention, and a
higher class preempting a lower-class request before its first token (which later succeeds)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.ops.helpers import chat, scrape, total
from tests.server.harness import MODEL, run_router
from tests.support import eventually

from .conftest import CHAT, Loop, admission, classes, closed_loop, peak_running


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def test_class_order_and_reserved_shares(http: httpx.AsyncClient) -> None:
    """Four places: interactive, default and bulk all backlogged. Bulk keeps its reserved
    quarter, interactive (higher) takes the rest, default (lower, nothing reserved) waits."""
    config = {
        "server": {"max_concurrent_requests": 4},
        "admission": admission(classes=classes(interactive=0.5, bulk=0.25)),
    }
    with run_router(config=config, sims=1, sim_kwargs={"delay_ms": 10.0}) as router:
        loops = {name: Loop() for name in ("interactive", "default", "bulk")}
        start = time.monotonic()
        until = start + 4.0
        await asyncio.gather(
            *(
                closed_loop(
                    http,
                    router.base_url,
                    loop,
                    clients=6,
                    until=until,
                    headers={"x-turnout-priority": name},
                )
                for name, loop in loops.items()
            )
        )
        window = (start + 1.0, until)
        served = {name: loop.count_between(*window) for name, loop in loops.items()}
        everything = sum(served.values())
        assert everything > 40, served
        # Bulk: its reserve (1 of 4 places), not more; default: nothing while others wait.
        assert 0.15 <= served["bulk"] / everything <= 0.35, served
        assert served["interactive"] >= 2 * served["bulk"], served
        assert served["default"] <= 0.05 * everything, served
        # Every class queued; what default waited for is counted per class.
        samples = scrape(router.base_url)
        assert total(samples, "turnout_admission_admitted_total", **{"class": "bulk"}) > 0


async def test_bad_class_header_is_400(http: httpx.AsyncClient) -> None:
    config = {"admission": admission()}
    with run_router(config=config, sims=1) as router:
        bad = await http.post(
            f"{router.base_url}{CHAT}", json=chat(), headers={"x-turnout-priority": "urgent"}
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "invalid_priority"
        bad = await http.post(
            f"{router.base_url}{CHAT}",
            json=chat(),
            headers={"x-turnout-ttft-deadline-ms": "soon"},
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["code"] == "invalid_deadline"


async def test_preemption_before_the_first_token(http: httpx.AsyncClient) -> None:
    """One place. A bulk request is admitted and waits for its first token (a slow prefill);
    an interactive one arrives: the bulk request is aborted on the worker and goes back to the
    queue, the interactive one is served first, then the bulk one succeeds. (Bulk has no
    reserved share here: a reserved place is never taken.)"""
    config = {
        "server": {"max_concurrent_requests": 1},
        "admission": admission(classes=classes(interactive=0.5)),
    }
    with run_router(config=config, sims=1, sim_kwargs={"ttft_ms": 1000.0}) as router:
        sim = router.sims[0]
        ended: dict[str, float] = {}

        async def send(name: str) -> httpx.Response:
            response = await http.post(
                f"{router.base_url}{CHAT}",
                json=chat(max_tokens=4),
                headers={"x-turnout-priority": name, "x-request-id": f"{name}-1"},
            )
            ended[name] = time.monotonic()
            return response

        bulk = asyncio.create_task(send("bulk"))
        await eventually(lambda: len(sim.requests) == 1, what="the bulk request on the worker")
        interactive = asyncio.create_task(send("interactive"))
        answered = await asyncio.gather(bulk, interactive)
        assert [r.status_code for r in answered] == [200, 200], [r.text for r in answered]
        assert ended["interactive"] < ended["bulk"]
        # The bulk request was sent twice: before and after it gave its place.
        bulk_sent = [r for r in sim.requests if r.request_id.startswith("bulk-1")]
        assert len(bulk_sent) == 2
        samples = scrape(router.base_url)
        assert total(samples, "turnout_admission_preempted_total", **{"class": "bulk"}) == 1
        # The worker counts the aborted call (the bench reads it as preemptions).
        await eventually(lambda: sim.rank_stats[0]["cancelled"] == 1, what="one cancelled call")


async def test_a_full_class_queue_is_429_and_a_long_wait_503(http: httpx.AsyncClient) -> None:
    """Shedding per class: bulk's queue holds one; the next bulk request gets 429, the queued
    one 503 after bulk's queue timeout, both with ``Retry-After``."""
    bulk_classes = classes()
    bulk_classes[3].update(queue_size=1, queue_timeout_s=1.0)
    config = {
        "server": {"max_concurrent_requests": 1},
        "admission": admission(classes=bulk_classes),
    }
    with run_router(config=config, sims=1, sim_kwargs={"ttft_ms": 3000.0}) as router:
        url = f"{router.base_url}{CHAT}"
        bulk = {"x-turnout-priority": "bulk"}
        running = asyncio.create_task(http.post(url, json=chat(max_tokens=2), headers=bulk))
        await eventually(lambda: len(router.sims[0].requests) == 1, what="one running")
        queued = asyncio.create_task(http.post(url, json=chat(max_tokens=2), headers=bulk))
        await eventually(
            lambda: total(scrape(router.base_url), "turnout_admission_waiting") == 1,
            what="one waiting",
        )
        full = await http.post(url, json=chat(max_tokens=2), headers=bulk)
        assert full.status_code == 429
        assert full.json()["error"]["code"] == "admission_queue_full"
        assert int(full.headers["retry-after"]) >= 1
        timed_out = await queued
        assert timed_out.status_code == 503
        assert timed_out.json()["error"]["code"] == "admission_queue_timeout"
        assert int(timed_out.headers["retry-after"]) >= 1
        assert (await running).status_code == 200
        samples = scrape(router.base_url)
        for reason in ("queue_full", "queue_timeout"):
            shed = total(samples, "turnout_admission_shed_total", reason=reason)
            assert shed == 1, reason


@pytest.mark.parametrize(("aging_s", "starves"), [(0.4, False), (0.0, True)])
async def test_ageing_lifts_a_waiting_request(
    http: httpx.AsyncClient, aging_s: float, starves: bool
) -> None:
    """One place, kept busy by interactive requests; a bulk request waiting among them rises a
    class per ``aging_s`` and is served within seconds. Without ageing it waits until the
    interactive load ends. (No reserved shares: ageing orders what the reserves leave.)"""
    config = {
        "server": {"max_concurrent_requests": 1},
        "admission": admission(aging_s=aging_s, classes=classes()),
    }
    with run_router(config=config, sims=1, sim_kwargs={"delay_ms": 20.0}) as router:
        start = time.monotonic()
        until = start + 4.0
        load = asyncio.create_task(
            closed_loop(
                http,
                router.base_url,
                Loop(),
                clients=3,
                until=until,
                headers={"x-turnout-priority": "interactive"},
                max_tokens=5,
            )
        )
        await asyncio.sleep(0.3)
        bulk = await http.post(
            f"{router.base_url}{CHAT}",
            json=chat(max_tokens=5),
            headers={"x-turnout-priority": "bulk"},
        )
        served_at = time.monotonic()
        await load
        assert bulk.status_code == 200
        assert (served_at >= until) is starves, served_at - start


async def test_a_held_share_stays_free_for_its_class(http: httpx.AsyncClient) -> None:
    """Four places, interactive holds a quarter: backlogged bulk work runs three at most, and
    an interactive request takes the fourth at once."""
    held = classes()
    held[1]["hold"] = 0.25
    config = {"server": {"max_concurrent_requests": 4}, "admission": admission(classes=held)}
    with run_router(config=config, sims=1, sim_kwargs={"delay_ms": 20.0}) as router:
        async with peak_running(router.sims[0]) as peak:
            until = time.monotonic() + 2.0
            bulk = asyncio.create_task(
                closed_loop(
                    http,
                    router.base_url,
                    Loop(),
                    clients=8,
                    until=until,
                    headers={"x-turnout-priority": "bulk"},
                    max_tokens=10,
                )
            )
            await asyncio.sleep(1.0)
            bulk_peak = peak.take()
            quick = await http.post(
                f"{router.base_url}{CHAT}",
                json=chat(max_tokens=2),
                headers={"x-turnout-priority": "interactive"},
            )
            await bulk
            assert quick.status_code == 200
            assert bulk_peak == 3
            assert peak.take() == 4  # the interactive one beside three bulk ones


async def test_a_background_response_is_admitted_in_its_submitters_class(
    http: httpx.AsyncClient,
) -> None:
    """The job of ``background: true`` outlives the request that submitted it; it waits for
    admission with a ticket of its own, of the submitter's class."""
    config = {"admission": admission(classes=classes(interactive=0.5, bulk=0.25))}
    with run_router(config=config, sims=1) as router:
        submitted = await http.post(
            f"{router.base_url}/v1/responses",
            json={"model": MODEL, "input": "a background task", "background": True, "store": True},
            headers={"x-turnout-priority": "bulk"},
        )
        assert submitted.status_code == 200, submitted.text
        response_id = submitted.json()["id"]

        async def finished() -> bool:
            polled = await http.get(f"{router.base_url}/v1/responses/{response_id}")
            return polled.json()["status"] == "completed"

        await eventually(finished, what="the background response to complete")
        samples = scrape(router.base_url)
        assert total(samples, "turnout_admission_admitted_total", **{"class": "bulk"}) == 1
        assert total(samples, "turnout_admission_admitted_total") == 1
