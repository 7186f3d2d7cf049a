"""A real ``redis-server`` that hangs (SIGSTOP) under a router: after a few calls that wait
their deadline, the store fails at once (reads 503, answers still given) with few warnings,
and it is used again once Redis is back (also when the call retrying it was cancelled)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.ops.redis_server import RedisServer
from tests.server.harness import MODEL, run_router
from turnout.config import ResponsesConfig
from turnout.responses.storage import make_storage
from turnout.responses.store import StoredResponse, StoreUnavailable

TIMEOUT_S = 1.0


def test_a_hung_redis_fails_calls_at_once_until_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    redis_server = RedisServer(tmp_path / "redis")
    section = {
        "storage": redis_server.url,
        "key_prefix": f"test-{uuid.uuid4().hex[:12]}",
        "timeout_s": TIMEOUT_S,
    }
    try:
        with run_router(config={"responses": section}, sims=1) as router:
            base = f"{router.base_url}/v1/responses"
            created = httpx.post(base, json={"model": MODEL, "input": "kept"}, timeout=30)
            assert created.status_code == 200, created.text
            kept = created.json()["id"]
            assert httpx.get(f"{base}/{kept}", timeout=30).status_code == 200

            redis_server.pause()
            paused = time.monotonic()
            caplog.set_level(logging.WARNING, logger="turnout.responses.store")
            waits = []
            for _ in range(12):
                started = time.monotonic()
                read = httpx.get(f"{base}/{kept}", timeout=30)
                waits.append(time.monotonic() - started)
                assert read.status_code == 503, read.text
                assert read.json()["error"]["code"] == "response_store_unavailable"
            for _ in range(5):  # answers still given: only keeping them fails
                started = time.monotonic()
                answer = httpx.post(base, json={"model": MODEL, "input": "hi"}, timeout=30)
                waits.append(time.monotonic() - started)
                assert answer.status_code == 200, answer.text
            # The first reads wait their deadline; once the breaker opens, only its retries
            # (one per 2 s) do.
            assert all(wait >= TIMEOUT_S * 0.9 for wait in waits[:3]), waits
            slow = sum(wait >= TIMEOUT_S / 2 for wait in waits[3:])
            assert slow <= 1 + (time.monotonic() - paused) / 2, waits
            told = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
            assert 1 <= len(told) <= 4, told

            redis_server.resume()
            deadline = time.monotonic() + 20
            while httpx.get(f"{base}/{kept}", timeout=30).status_code != 200:
                assert time.monotonic() < deadline, "the store was never used again"
                time.sleep(0.2)
            assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        redis_server.stop()


async def test_a_retry_cancelled_midway_lets_the_next_call_retry(tmp_path: Path) -> None:
    # The request whose call was the breaker's retry goes away (its client left): the store
    # must not stay failing forever for want of that retry's outcome.
    redis_server = RedisServer(tmp_path / "redis")
    section = ResponsesConfig(
        storage=redis_server.url, key_prefix=f"test-{uuid.uuid4().hex[:12]}", timeout_s=0.3
    )
    storage = make_storage(section)
    store = storage.responses
    kept = StoredResponse({"id": "resp_1", "output": []}, [])
    try:
        await store.put(kept)
        redis_server.pause()
        for _ in range(3):  # the breaker opens
            with pytest.raises(StoreUnavailable):
                await store.get("resp_1")
        await asyncio.sleep(2.1)  # its retry is due
        retry = asyncio.create_task(store.get("resp_1"))
        await asyncio.sleep(0.05)
        retry.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await retry
        redis_server.resume()
        assert await store.get("resp_1") == kept
    finally:
        await storage.aclose()
        redis_server.stop()
