"""Kubernetes discovery end to end: ``turnout serve`` (a process) finds simulated SGLang workers
(processes) through the real kubernetes-asyncio client talking to a scripted API server.

Also measures, and prints, how long a pod that turned Ready waits for its first request and how
long a deleted pod keeps getting new ones (``pytest -s`` shows the figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from turnout.demo_model import path as demo_path
from turnout.sim import SimProcess, get_records

from ..server.harness import MODEL, free_port
from .k8s_api import ScriptedApiServer

MODEL_NOTE = {"turnout.io/model": MODEL}


class Traffic:
    """Sequential small requests in the background; remembers when each was sent."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.sent: dict[str, float] = {}
        self.failures: list[str] = []
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        n = 0
        while True:
            n += 1
            request_id = f"t{n}"
            self.sent[request_id] = time.monotonic()
            try:
                reply = await self.client.post(
                    "/v1/chat/completions",
                    json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                          "max_tokens": 2},
                    headers={"x-request-id": request_id},
                )  # fmt: skip
                if reply.status_code != 200:
                    self.failures.append(f"{request_id}: {reply.status_code} {reply.text}")
            except httpx.HTTPError as exc:
                self.failures.append(f"{request_id}: {exc!r}")
            await asyncio.sleep(0.005)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def traffic_on(url: str) -> list[str]:
    """Ids of the background requests a simulator received, in order."""
    records = await get_records(url)
    return [rid.split("-", 1)[0] for rid in records["requests"] if rid.startswith("t")]


@pytest.fixture
async def api() -> AsyncIterator[ScriptedApiServer]:
    server = await ScriptedApiServer().start()
    yield server
    await server.stop()


async def test_pods_join_and_leave_a_running_router(api: ScriptedApiServer, tmp_path: Path) -> None:
    sims = await asyncio.gather(
        *(
            asyncio.to_thread(SimProcess("--served-model-name", MODEL, "--delay-ms", "5").start)
            for _ in range(2)
        )
    )
    port = free_port()
    config = {
        "server": {"port": port, "log_level": "info"},
        "discovery": [
            {
                "provider": "kubernetes",
                "options": {"kubeconfig": str(api.kubeconfig(tmp_path)), "selector": "app=sglang"},
            }
        ],
        "models": {MODEL: {"tokenizer_path": str(demo_path())}},
        "defaults": {"policy": "round_robin"},
        "health": {"interval_s": 0.5, "pending_interval_s": 0.1},
    }
    (tmp_path / "turnout.yaml").write_text(yaml.safe_dump(config))
    api.add_pod("sglang-0", port=sims[0].port, annotations=MODEL_NOTE)
    log = (tmp_path / "turnout.log").open("w")
    router = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "turnout", "serve", "--config", str(tmp_path / "turnout.yaml")],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:

            async def ready() -> bool:
                assert router.returncode is None, (tmp_path / "turnout.log").read_text()
                with contextlib.suppress(httpx.HTTPError):
                    return (await client.get("/readiness")).status_code == 200
                return False

            deadline = time.monotonic() + 90
            while not await ready():
                assert time.monotonic() < deadline, (tmp_path / "turnout.log").read_text()
                await asyncio.sleep(0.1)
            await scenario(api, sims, client)
    finally:
        router.terminate()
        await asyncio.wait_for(router.wait(), 30)
        log.close()
        for sim in sims:
            sim.stop()


async def scenario(
    api: ScriptedApiServer, sims: list[SimProcess], client: httpx.AsyncClient
) -> None:
    traffic = Traffic(client)
    traffic.start()
    try:
        # A pod that starts unready gets nothing; once Ready, it gets traffic.
        api.add_pod("sglang-1", port=sims[1].port, ready=False, annotations=MODEL_NOTE)
        await asyncio.sleep(0.5)
        assert await traffic_on(sims[1].url) == []
        made_ready = time.monotonic()
        api.set_ready("sglang-1", True)
        first = await wait_for_traffic(sims[1].url)
        ready_to_routed = max(0.0, traffic.sent[first] - made_ready)

        # Long streams until one runs on sglang-1 (round robin shares its turns with the
        # background traffic, so any one stream may land on either pod); then sglang-1 is
        # deleted while that stream runs.
        streams = await streams_until_one_runs_on(client, sims)
        deleted = time.monotonic()
        api.start_deleting("sglang-1")  # terminating: drained at once
        results = await asyncio.gather(*streams)
        assert results == [("length", 300)] * len(streams)  # the in-flight streams finished
        await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - deleted)))
        api.delete_pod("sglang-1")  # gone (well after the drain began)
        after_delete = [rid for rid in await traffic_on(sims[1].url) if traffic.sent[rid] > deleted]
        last = max((traffic.sent[rid] for rid in after_delete), default=deleted)
        deleted_to_quiet = last - deleted
        count_before = len(await traffic_on(sims[1].url))
        await asyncio.sleep(0.5)
        assert len(await traffic_on(sims[1].url)) == count_before  # no new requests
        assert len(await traffic_on(sims[0].url)) > 0

        # The API server restarts; a pod added meanwhile is found once it is back.
        restart = asyncio.ensure_future(api.restart(down_s=0.5))
        await asyncio.sleep(0.1)
        api.add_pod("sglang-1b", port=sims[1].port, annotations=MODEL_NOTE)
        await restart
        await wait_for_traffic(sims[1].url, after=count_before)
    finally:
        await traffic.stop()
    assert traffic.failures == []
    times = sorted(traffic.sent.values())
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    print(
        f"\npod Ready -> first request routed to it: {ready_to_routed * 1000:.0f} ms"
        f"\npod deleted -> last new request routed to it: {deleted_to_quiet * 1000:.0f} ms"
        f" ({len(after_delete)} request(s) sent after the deletion event reached it)"
        f"\n(one request every {gaps[len(gaps) // 2] * 1000:.0f} ms, median, over "
        f"{len(times)} requests)"
    )
    assert ready_to_routed < 10
    assert deleted_to_quiet < 0.9  # the drain began with the deletionTimestamp, not the delete


async def wait_for_traffic(url: str, after: int = 0, within: float = 30.0) -> str:
    deadline = time.monotonic() + within
    while True:
        received = await traffic_on(url)
        if len(received) > after:
            return received[after]
        assert time.monotonic() < deadline, "no traffic reached the pod"
        await asyncio.sleep(0.02)


async def streams_until_one_runs_on(
    client: httpx.AsyncClient, sims: list[SimProcess], tries: int = 8
) -> list[asyncio.Future[tuple[str, int]]]:
    """Long streams started one at a time until one runs on ``sims[1]``; all of them."""
    streams: list[asyncio.Future[tuple[str, int]]] = []
    for n in range(tries):
        request_id = f"long{n}"
        streams.append(asyncio.ensure_future(long_stream(client, request_id)))
        deadline = time.monotonic() + 20
        while True:
            landed = [await holds(sim.url, request_id) for sim in sims]
            if any(landed):
                break
            assert time.monotonic() < deadline, f"{request_id} reached no pod"
            await asyncio.sleep(0.02)
        if landed[1]:
            return streams
    raise AssertionError(f"none of {tries} long streams landed on sglang-1")


async def holds(url: str, request_id: str) -> bool:
    """Whether the simulator at ``url`` received ``request_id`` and still runs something."""
    records = await get_records(url)
    return (
        any(rid.split("-", 1)[0] == request_id for rid in records["requests"])
        and records["running"] > 0
    )


async def long_stream(client: httpx.AsyncClient, request_id: str) -> tuple[str, int]:
    """A streamed completion of 300 tokens (about 1.5 s on a 5 ms/token simulator)."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": 300,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    finish, tokens = "", 0
    async with client.stream(
        "POST", "/v1/chat/completions", json=body, headers={"x-request-id": request_id}
    ) as reply:
        assert reply.status_code == 200
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices") or ():
                finish = choice.get("finish_reason") or finish
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return finish, tokens
