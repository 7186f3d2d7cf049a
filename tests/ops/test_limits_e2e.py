"""Limits over real HTTP: body size (413), concurrency with a bounded queue (429 / 503), request
timeout (504, and the worker request is aborted), and no permit leaks when clients leave."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.server.harness import Router, run_router
from tests.support import eventually, sse_events

from .helpers import chat, scrape, value

CHAT = "/v1/chat/completions"
#: Simulated pacing: each request below takes about tokens × 40 ms.
DELAY_MS = 40.0


def outcome_of(outcomes: dict[str, str], client_id: str) -> str | None:
    """The worker's outcome for a client-given request id (turnout adds a unique suffix)."""
    for rid, outcome in outcomes.items():
        if rid.startswith(client_id + "-"):
            return outcome
    return None


LIMITED = {
    "max_concurrent_requests": 1,
    "queue_size": 1,
    "queue_timeout_s": 1.0,
    "max_body_bytes": 4096,
}


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with run_router(config={"server": LIMITED}, sims=1) as running:
        yield running


@pytest.fixture(scope="module")
def guarded_router() -> Iterator[Router]:
    """The same under the connection guard of ``turnout serve``, which tells a request that
    its client left (no task reading ``receive``)."""
    with run_router(config={"server": LIMITED}, sims=1, guarded=True) as running:
        yield running


@pytest.fixture(params=["router", "guarded_router"])
def leave_router(request: pytest.FixtureRequest) -> Router:
    """Each way a request notices its client leaving."""
    chosen: Router = request.getfixturevalue(request.param)
    return chosen


@pytest.fixture(scope="module")
def slow_router() -> Iterator[Router]:
    with run_router(config={"server": {"request_timeout_s": 0.5}}, sims=1) as running:
        yield running


@pytest.fixture(autouse=True)
def reset_knobs(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("router", "guarded_router", "slow_router"):
        if name in request.fixturenames:
            for sim in request.getfixturevalue(name).sims:
                sim.knobs.update({"delay_ms": 0.0})


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20) as http:
        yield http


def long_chat(tokens: int, stream: bool = True) -> dict[str, object]:
    text = " ".join(["word"] * 80)
    return chat(text, stream=stream, max_tokens=tokens)


def queue_depth(router: Router) -> float:
    return value(scrape(router.base_url), "turnout_admission_queue_depth")


async def first_chunk_then(
    client: httpx.AsyncClient, router: Router, started: asyncio.Event, tokens: int
) -> list[str]:
    """Stream a slow chat; set ``started`` once its first event arrived; return all events."""
    lines: list[str] = []
    async with client.stream("POST", f"{router.base_url}{CHAT}", json=long_chat(tokens)) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
                started.set()
    return lines


async def test_queue_full_is_429_and_queue_timeout_is_503(
    router: Router, client: httpx.AsyncClient
) -> None:
    router.sims[0].knobs.update({"delay_ms": DELAY_MS})
    started = asyncio.Event()
    running = asyncio.create_task(first_chunk_then(client, router, started, 60))
    await asyncio.wait_for(started.wait(), 10)
    queued = asyncio.create_task(client.post(f"{router.base_url}{CHAT}", json=chat()))
    await eventually(lambda: queue_depth(router) == 1)

    full = await client.post(f"{router.base_url}{CHAT}", json=chat())
    assert full.status_code == 429
    assert full.json()["error"]["code"] == "admission_queue_full"
    assert full.json()["error"]["type"] == "rate_limit_error"

    timed_out = await queued
    assert timed_out.status_code == 503
    assert timed_out.json()["error"]["code"] == "admission_queue_timeout"
    events = await running
    assert events[-1] == "[DONE]"
    samples = scrape(router.base_url)
    assert value(samples, "turnout_admission_rejected_total", reason="admission_queue_full") >= 1
    assert value(samples, "turnout_admission_queue_depth") == 0


async def test_client_leaving_the_queue_frees_its_place(
    leave_router: Router, client: httpx.AsyncClient
) -> None:
    router = leave_router
    sim = router.sims[0]
    sim.knobs.update({"delay_ms": DELAY_MS})
    before = scrape(router.base_url)
    started = asyncio.Event()
    running = asyncio.create_task(first_chunk_then(client, router, started, 60))
    await asyncio.wait_for(started.wait(), 10)
    requests_seen = len(sim.requests)

    async with httpx.AsyncClient(timeout=20) as impatient:
        waiting = asyncio.create_task(impatient.post(f"{router.base_url}{CHAT}", json=chat()))
        await eventually(lambda: queue_depth(router) == 1)
        waiting.cancel()  # the client goes away while queued
        with pytest.raises(asyncio.CancelledError):
            await waiting
    await eventually(lambda: queue_depth(router) == 0, 0.9)  # well before its queue timeout
    assert (await running)[-1] == "[DONE]"
    # The abandoned request never reached a worker, and the permit is free again.
    assert len(sim.requests) == requests_seen
    sim.knobs.update({"delay_ms": 0.0})
    for _ in range(2):
        assert (await client.post(f"{router.base_url}{CHAT}", json=chat())).status_code == 200
    after = scrape(router.base_url)
    reason = {"reason": "client_gone"}
    assert value(after, "turnout_admission_rejected_total", **reason) == (
        value(before, "turnout_admission_rejected_total", **reason) + 1
    )


async def test_client_leaving_mid_stream_releases_the_permit_and_aborts(
    leave_router: Router, client: httpx.AsyncClient
) -> None:
    router = leave_router
    sim = router.sims[0]
    sim.knobs.update({"delay_ms": DELAY_MS})
    headers = {"x-request-id": "leaves-mid-stream"}
    async with (
        httpx.AsyncClient(timeout=20) as leaving,
        leaving.stream(
            "POST", f"{router.base_url}{CHAT}", json=long_chat(200), headers=headers
        ) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                break
    # 200 tokens would take 8 s; the worker is told to stop as soon as the client left.
    await eventually(
        lambda: outcome_of(sim.records.outcomes, "leaves-mid-stream") in ("abort", "cancelled")
    )
    sim.knobs.update({"delay_ms": 0.0})
    reply = await client.post(f"{router.base_url}{CHAT}", json=chat())
    assert reply.status_code == 200  # not 503 after a queue wait: the permit came back
    samples = scrape(router.base_url)
    assert value(samples, "turnout_requests_in_flight", route=CHAT) == 0


async def test_body_too_large_is_413_with_an_openai_error(
    router: Router, client: httpx.AsyncClient
) -> None:
    big = chat("x" * 5000)
    for path in (CHAT, "/v1/tokenize"):
        response = await client.post(f"{router.base_url}{path}", json=big)
        assert response.status_code == 413, path
        assert response.json()["error"]["message"], path

    async def chunks() -> AsyncIterator[bytes]:  # no content-length: the body is counted
        body = json.dumps(big).encode()
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    response = await client.post(
        f"{router.base_url}{CHAT}", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert "error" in response.json()


async def test_request_timeout_is_504_and_aborts_the_worker(
    slow_router: Router, client: httpx.AsyncClient
) -> None:
    sim = slow_router.sims[0]
    sim.knobs.update({"delay_ms": 50.0})
    started = time.monotonic()
    response = await client.post(
        f"{slow_router.base_url}{CHAT}",
        json=long_chat(100, stream=False),
        headers={"x-request-id": "too-slow"},
    )
    assert time.monotonic() - started < 3
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "request_timeout"
    await eventually(lambda: outcome_of(sim.records.outcomes, "too-slow") in ("abort", "cancelled"))
    samples = scrape(slow_router.base_url)
    labels = {"route": CHAT, "model": "turnout-demo", "status": "504"}
    assert value(samples, "turnout_requests_total", **labels) >= 1


async def test_streamed_request_timeout_ends_with_an_error_event(
    slow_router: Router, client: httpx.AsyncClient
) -> None:
    sim = slow_router.sims[0]
    sim.knobs.update({"delay_ms": 50.0})
    response = await client.post(
        f"{slow_router.base_url}{CHAT}",
        json=long_chat(100),
        headers={"x-request-id": "too-slow-stream"},
    )
    assert response.status_code == 200
    events = sse_events(response.text)
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "request_timeout"
    assert len(events) > 3  # some tokens arrived before the deadline
    await eventually(
        lambda: outcome_of(sim.records.outcomes, "too-slow-stream") in ("abort", "cancelled")
    )
