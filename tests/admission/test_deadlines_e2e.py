"""TTFT deadlines over real sockets: a request whose deadline the queue ahead of it cannot meet
(by the measured drain rate) is refused at once with 503 and ``Retry-After``; one with room is
served."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.ops.helpers import chat, scrape, total
from tests.server.harness import run_router
from tests.support import eventually

from .conftest import CHAT, admission


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def test_unmeetable_deadline_is_refused_early(http: httpx.AsyncClient) -> None:
    config = {"server": {"max_concurrent_requests": 1}, "admission": admission()}
    with run_router(config=config, sims=1, sim_kwargs={"delay_ms": 50.0}) as router:
        url = f"{router.base_url}{CHAT}"
        body = chat(max_tokens=10)  # about 0.5 s each
        for _ in range(4):  # the drain rate is measured
            assert (await http.post(url, json=body)).status_code == 200
        backlog = [asyncio.create_task(http.post(url, json=body)) for _ in range(8)]
        await eventually(
            lambda: total(scrape(router.base_url), "turnout_admission_waiting") >= 4,
            what="a queue of four",
        )
        sent = time.monotonic()
        # Four or more ahead at about two a second: its first token is seconds away.
        late = await http.post(url, json=body, headers={"x-turnout-ttft-deadline-ms": "1000"})
        took = time.monotonic() - sent
        assert late.status_code == 503, late.text
        assert late.json()["error"]["code"] == "deadline_unmeetable"
        assert int(late.headers["retry-after"]) >= 1
        assert took < 1.0  # refused before its deadline, not served late
        roomy = await http.post(url, json=body, headers={"x-turnout-ttft-deadline-ms": "30000"})
        assert roomy.status_code == 200
        assert all(r.status_code == 200 for r in await asyncio.gather(*backlog))
        shed = total(
            scrape(router.base_url), "turnout_admission_shed_total", reason="deadline_unmeetable"
        )
        assert shed == 1
