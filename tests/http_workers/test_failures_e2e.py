"""HTTP workers that fail: one that refuses connections before the first byte (its requests
are retried on the other), one that hangs (504 JSON once the first-byte deadline passes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import openai

from turnout.testing.router import RunningRouter, run_router

from .conftest import REMOTE, front

CHAT = {"model": REMOTE, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def worker_of(router: RunningRouter, url: str) -> dict[str, Any]:
    workers = httpx.get(router.base_url + "/workers", timeout=5).json()["workers"]
    found: dict[str, Any] = next(w for w in workers if w["url"] == url)
    return found


def test_a_refused_connection_is_retried_on_the_other_upstream(
    upstreams: list[RunningRouter],
) -> None:
    # Probed rarely and hard to call unhealthy: the stopped upstream stays in rotation, so
    # that requests meet it.
    health = {"interval_s": 60, "pending_interval_s": 0.1, "timeout_s": 2, "failure_threshold": 50}
    config = {"health": health, "defaults": {"policy": "round_robin"}}
    with contextlib.ExitStack() as doomed_stack:
        doomed = doomed_stack.enter_context(run_router())
        urls = [doomed.base_url, upstreams[0].base_url]
        with front(urls, config) as router:
            doomed_stack.close()  # the upstream stops: its port refuses connections
            client = openai.OpenAI(base_url=router.base_url + "/v1", api_key="x", max_retries=0)
            for _ in range(4):
                answer = client.chat.completions.create(**CHAT)
                assert answer.choices[0].message.content
            stream = client.chat.completions.create(**CHAT, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            dead = worker_of(router, doomed.base_url)
            assert dead["failures_total"] >= 2
            assert "ConnectError" in str(dead["last_error"])
            metrics = httpx.get(router.base_url + "/metrics", timeout=5).text
            assert f'turnout_retries_total{{model="{REMOTE}"}}' in metrics


def test_a_hung_upstream_is_a_504_json_error(upstreams: list[RunningRouter]) -> None:
    hung = upstreams[1]
    config = {"wire": {"first_response_timeout_s": 1.0}}
    with front([hung.base_url], config) as router:
        hung.sims[0].knobs.update({"hang": True})
        try:
            for stream in (False, True):
                answer = httpx.post(
                    router.base_url + "/v1/chat/completions",
                    json={**CHAT, "stream": stream},
                    timeout=30,
                )
                assert answer.status_code == 504, answer.text
                error = answer.json()["error"]
                assert error["code"] == "upstream_error"
                assert "1s" in error["message"]
        finally:
            hung.sims[0].knobs.update({"hang": False})


def test_a_client_that_leaves_a_stream_closes_the_upstream_request(
    upstreams: list[RunningRouter],
) -> None:
    upstream = upstreams[0]
    sim = upstream.sims[0]
    with front([upstream.base_url]) as router:
        sim.knobs.update({"delay_ms": 20})
        try:
            before = set(sim.records.outcomes)
            body = {**CHAT, "max_tokens": 500, "stream": True, "ignore_eos": True}
            with httpx.stream(
                "POST", router.base_url + "/v1/chat/completions", json=body, timeout=30
            ) as answer:
                assert answer.status_code == 200
                pieces = answer.iter_raw()
                next(pieces)
                next(pieces)
            # The upstream turnout saw its client (this router) leave, and aborted its worker.

            def ended() -> list[str]:
                return [v for k, v in sim.records.outcomes.items() if k not in before]

            router.wait_until(lambda: bool(ended()), timeout=10)
            assert ended()[0] in ("abort", "cancelled")
        finally:
            sim.knobs.update({"delay_ms": 0})


def test_how_upstream_failures_count() -> None:
    """Which failures open the circuit, which are tried elsewhere, which are sent again."""
    from turnout.http_workers.connection import (
        HttpClient,
        HttpConnection,
        UpstreamClosed,
        UpstreamUnavailable,
    )
    from turnout.http_workers.settings import HttpWorkersSettings
    from turnout.workers.settings import WorkerSpec

    connection = HttpConnection(
        WorkerSpec(url="http://127.0.0.1:9"), HttpClient(HttpWorkersSettings())
    )
    closed = connection.classify(UpstreamClosed("Server disconnected"))
    assert closed is not None
    assert (closed.refused, closed.worker_fault, closed.retryable) == (True, False, True)
    busy = connection.classify(UpstreamUnavailable(429, b"slow down"))
    assert busy is not None
    assert (busy.status, busy.worker_fault, busy.retryable) == (503, False, True)
    broken = connection.classify(UpstreamUnavailable(500, b"oops"))
    assert broken is not None
    assert (broken.status, broken.worker_fault, broken.retryable) == (502, True, True)
    refused = connection.classify(httpx.ConnectError("refused"))
    assert refused is not None
    assert (refused.worker_fault, refused.retryable, refused.refused) == (True, True, False)
    assert connection.classify(ValueError("not the worker's")) is None

    # The relay's own client's failures count as httpx's did.
    from turnout.http_workers import upstream_client as client

    expected = {
        client.UpstreamClosed("closed"): (502, False, True, True),
        client.ConnectError("refused"): (502, True, True, False),
        client.ReadError("reset mid-body"): (502, True, True, False),
        client.RemoteProtocolError("garbage"): (502, True, True, False),
        client.ConnectTimeout("slow"): (504, True, True, False),
        client.ReadTimeout("silent"): (504, True, True, False),
        client.PoolTimeout("busy"): (503, False, True, False),
        client.InvalidHeader("a line break"): (503, True, False, False),
    }
    for error, counts in expected.items():
        found = connection.classify(error)
        assert found is not None, error
        assert (found.status, found.worker_fault, found.retryable, found.refused) == counts, error


def test_a_kept_alive_connection_the_upstream_closes_is_sent_again() -> None:
    """The keep-alive race, end to end: an upstream that closes each connection when its
    second request arrives, unanswered. Every request succeeds: the one that met the closing
    connection is sent again at once on a new one."""
    from .test_upstream_client import read_request

    unanswered = 0
    answer = json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "model": REMOTE,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
        }
    ).encode()
    models = json.dumps({"object": "list", "data": [{"id": REMOTE}]}).encode()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal unanswered
        posts = 0
        try:
            while (request := await read_request(reader)) is not None:
                if request.startswith(b"POST"):
                    posts += 1
                    if posts == 2:
                        unanswered += 1
                        return
                body = answer if request.startswith(b"POST") else models
                head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                writer.write(head + b"content-length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        finally:
            writer.close()

    ready = threading.Event()
    stop: list[Callable[[], None]] = []
    ports: list[int] = []

    async def main() -> None:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        ports.append(server.sockets[0].getsockname()[1])
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        stop.append(lambda: loop.call_soon_threadsafe(done.set))
        ready.set()
        async with server:
            await done.wait()

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        with front([f"http://127.0.0.1:{ports[0]}"]) as router:
            for _ in range(4):
                got = httpx.post(router.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
                assert got.status_code == 200, got.text
                assert got.json()["choices"][0]["message"]["content"] == "ok"
            assert unanswered >= 3
    finally:
        stop[0]()
        thread.join(10)
