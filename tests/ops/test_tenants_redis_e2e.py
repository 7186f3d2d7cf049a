"""Tenant budgets in a real Redis: two routers share one budget exactly, the official client's
retries wait as long as the 429 says, and a Redis that is down or hung never stalls a request
(per-process limits with a warning, or 503 when failing closed, and shared again once back)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import redis

from tests.server.harness import MODEL, Router, run_router
from tests.support import bearer
from turnout.sim import SimProcess

from .helpers import Serve, chat, fresh_window, scrape, value
from .redis_server import RedisServer, closed_port_url, silent_server

CHAT = "/v1/chat/completions"
KEY = "tenant-key"
PLAIN = "plain-key"


def limits(storage: str, **extra: Any) -> dict[str, Any]:
    """A ``limits`` section with a key prefix of its own (the tests share one Redis)."""
    return {"storage": storage, "key_prefix": f"test-{uuid.uuid4().hex[:12]}", **extra}


def tenant_router(tenant: dict[str, Any], limits_section: dict[str, Any]) -> Any:
    config = {
        "server": {"api_keys": [PLAIN]},
        "tenants": {"team": {"keys": [KEY], **tenant}},
        "limits": limits_section,
    }
    return run_router(config=config, sims=1)


def post(base_url: str, key: str = KEY, **extra: Any) -> httpx.Response:
    return httpx.post(f"{base_url}{CHAT}", json=chat(**extra), headers=bearer(key), timeout=30)


def storage_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "turnout.tenants"]


# -- shared budgets ----------------------------------------------------------------------------

SHARED_TENANTS = {
    "team": {"keys": [KEY], "requests_per_minute": 7},
    "solo": {"keys": ["solo-key"], "concurrent_requests": 1},
}


def test_two_routers_share_one_tenant_budget_exactly(redis_server: RedisServer) -> None:
    """Two routers (two apps, each with its own process-local state) count in one Redis: the
    tenant's 7 requests a minute are 7 in all, and one running request fills its one slot on
    both."""
    config = {"tenants": SHARED_TENANTS, "limits": limits(redis_server.url)}
    with run_router(config=config, sims=1) as first, run_router(config=config, sims=1) as second:
        routers = [first, second]
        statuses = [post(routers[i % 2].base_url).status_code for i in range(14)]
        assert statuses == [200] * 7 + [429] * 7, statuses
        asyncio.run(_one_slot_for_both(first, second))


async def _one_slot_for_both(first: Router, second: Router) -> None:
    first.sims[0].knobs.update({"delay_ms": 500.0})  # the first answer runs while we ask
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            started = asyncio.Event()

            async def long_stream() -> None:
                body = chat(" ".join(["word"] * 20), stream=True)
                url = f"{first.base_url}{CHAT}"
                async with client.stream("POST", url, json=body, headers=bearer("solo-key")) as r:
                    assert r.status_code == 200
                    async for _ in r.aiter_lines():
                        started.set()

            running = asyncio.create_task(long_stream())
            await asyncio.wait_for(started.wait(), 10)
            url = f"{second.base_url}{CHAT}"
            refused = await client.post(url, json=chat(), headers=bearer("solo-key"))
            first.sims[0].knobs.update({"delay_ms": 0.0})
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"
            await running
            deadline = time.monotonic() + 5
            while True:  # the slot is given back in the background
                answer = await client.post(url, json=chat(), headers=bearer("solo-key"))
                if answer.status_code == 200:
                    break
                assert time.monotonic() < deadline, answer.text
                await asyncio.sleep(0.05)
    finally:
        first.sims[0].knobs.update({"delay_ms": 0.0})


@pytest.fixture(scope="module")
def sim_process() -> Iterator[SimProcess]:
    with SimProcess("--served-model-name", MODEL) as running:
        yield running


@pytest.mark.slow
def test_two_turnout_serve_processes_share_one_tenant_budget_exactly(
    tmp_path: Path, redis_server: RedisServer, sim_process: SimProcess
) -> None:
    sections = {"tenants": SHARED_TENANTS, "limits": limits(redis_server.url)}
    server = {"expose_internals": True}  # tenant labels on /metrics without a key
    routers = [Serve(tmp_path / str(i), sim_process.url, server, config=sections) for i in range(2)]
    try:
        for router in routers:
            router.wait_ready()
        statuses = [post(routers[i % 2].base_url).status_code for i in range(14)]
        assert statuses == [200] * 7 + [429] * 7, statuses
        for router in routers:
            samples = scrape(router.base_url)
            assert value(samples, "turnout_tenant_requests_total", tenant="team", status="200") in (
                3,
                4,
            )
    finally:
        for router in routers:
            router.close()


def test_the_openai_client_waits_as_long_as_the_429_says(redis_server: RedisServer) -> None:
    """Two requests per 2-second window (the window starts at the first request): the third
    is refused with ``retry-after-ms`` near 2 s, and the client's retry comes no earlier."""
    events: list[tuple[str, float, httpx.Headers | None]] = []

    def on_request(request: httpx.Request) -> None:
        events.append(("request", time.monotonic(), None))

    def on_response(response: httpx.Response) -> None:
        events.append((str(response.status_code), time.monotonic(), response.headers))

    with tenant_router({"requests_per_minute": 60}, limits(redis_server.url, window_s=2)) as r:
        hooks: dict[str, Any] = {"request": [on_request], "response": [on_response]}
        with httpx.Client(event_hooks=hooks, timeout=30) as http:
            client = openai.OpenAI(
                base_url=f"{r.base_url}/v1", api_key=KEY, max_retries=2, http_client=http
            )
            messages: Any = [{"role": "user", "content": "hello"}]
            for _ in range(3):
                answer = client.chat.completions.create(model=MODEL, messages=messages)
                assert answer.choices[0].message.content == "hello"
    statuses = [kind for kind, _, _ in events if kind != "request"]
    assert statuses[:2] == ["200", "200"]
    assert statuses[-1] == "200"
    assert "429" in statuses
    index = next(i for i, (kind, _, _) in enumerate(events) if kind == "429")
    _, refused_at, headers = events[index]
    assert headers is not None
    wait_s = int(headers["retry-after-ms"]) / 1000
    assert 1.0 <= wait_s <= 2.2, wait_s  # longer than the client's own backoff (< 1 s)
    # Whole seconds, rounded up: 2, or 3 when the window's edge (Redis's clock) is a hair past 2 s.
    assert int(headers["retry-after"]) == math.ceil(int(headers["retry-after-ms"]) / 1000)
    assert headers["x-ratelimit-limit-requests"] == "2"
    retried_at = events[index + 1][1]
    assert events[index + 1][0] == "request"
    assert retried_at - refused_at >= wait_s - 0.05


# -- an unreachable or hung Redis --------------------------------------------------------------


def test_unreachable_redis_keeps_serving_with_per_process_limits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="turnout.tenants")
    with tenant_router({"requests_per_minute": 2}, limits(closed_port_url())) as r:
        fresh_window(60)  # the fallback counts in memory, in clock-aligned windows
        statuses = [post(r.base_url).status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        assert post(r.base_url, PLAIN).status_code == 200
    assert any("unreachable" in line for line in storage_warnings(caplog))


def test_unreachable_redis_failing_closed_refuses_limited_tenants_only() -> None:
    section = limits(closed_port_url(), on_storage_error="closed")
    with tenant_router({"requests_per_minute": 100}, section) as r:
        refused = post(r.base_url)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "limits_storage_unavailable"
        assert post(r.base_url, PLAIN).status_code == 200
        samples = scrape(r.base_url, **bearer(PLAIN))
        assert value(samples, "turnout_tenant_rejected_total", tenant="team", limit="storage") == 1


def test_a_hung_redis_does_not_stall_requests(caplog: pytest.LogCaptureFixture) -> None:
    """A server that accepts and never answers: each request still answers (the storage call
    gives up at its deadline, then budgets are counted in the process)."""
    caplog.set_level(logging.WARNING, logger="turnout.tenants")
    with silent_server() as url:
        tenant = {"requests_per_minute": 2, "tokens_per_minute": 10_000, "concurrent_requests": 5}
        with tenant_router(tenant, limits(url, timeout_s=0.3)) as r:
            fresh_window(60)
            statuses = []
            for _ in range(3):
                started = time.monotonic()
                statuses.append(post(r.base_url).status_code)
                assert time.monotonic() - started < 10
            assert statuses == [200, 200, 429]
    assert any("storage unreachable" in line for line in storage_warnings(caplog))


def test_a_frozen_redis_is_used_again_once_it_answers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="turnout.tenants")
    server = RedisServer(tmp_path / "redis")
    try:
        section = limits(server.url, timeout_s=0.3, retry_interval_s=0.2)
        with tenant_router({"requests_per_minute": 1000}, section) as r:
            assert post(r.base_url).status_code == 200
            assert _keys(server, section["key_prefix"])  # counted in Redis
            server.pause()
            started = time.monotonic()
            assert post(r.base_url).status_code == 200  # counted in the process meanwhile
            assert time.monotonic() - started < 10
            assert any("within the deadline" in m for m in storage_warnings(caplog))
            server.resume()
            r.wait_until(lambda: any("again" in m for m in storage_warnings(caplog)), 10)
            before = _count(server, section["key_prefix"])
            assert post(r.base_url).status_code == 200
            assert _count(server, section["key_prefix"]) == before + 1
    finally:
        server.stop()


def _keys(server: RedisServer, prefix: str) -> list[bytes]:
    with redis.Redis(port=server.port, socket_timeout=5) as client:
        return list(client.keys(f"{prefix}:*"))


def _count(server: RedisServer, prefix: str) -> int:
    """The requests counted in the current window of the tenant's request limit."""
    with redis.Redis(port=server.port, socket_timeout=5) as client:
        keys = [k for k in client.keys(f"{prefix}:*requests*") if not k.endswith(b"/-1")]
        return sum(int(client.get(key) or 0) for key in keys)
