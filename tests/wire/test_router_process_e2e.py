"""The router process under answers that are large or not read: its event loop stays
responsive and its memory stays bounded (router and simulated workers in their own processes,
real sockets throughout)."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from ._processes import RouterProcess, router_with_sims

pytestmark = pytest.mark.slow

TRANSPORTS = ["native", "grpcio"]


def poll_health(router: RouterProcess, running: threading.Event) -> list[float]:
    """/health latencies (seconds) measured while ``running`` is set."""
    latencies: list[float] = []
    with httpx.Client(base_url=router.base_url, timeout=60) as client:
        while running.is_set():
            started = time.perf_counter()
            assert client.get("/health").status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.01)
    return latencies


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_health_stays_responsive_while_a_huge_answer_is_assembled(
    tmp_path: Path, transport: str
) -> None:
    """n=128 with top_logprobs=20, not streamed: ~10 MB of answer worked on by the router.

    The worker's messages are handed over in slices with the event loop free in between, so
    /health keeps answering; before, the whole answer was worked on in one or two steps and
    /health waited for most of the request.
    """
    body = {
        "messages": [{"role": "user", "content": "tell me a long story about everything " * 5}],
        "n": 128,
        "logprobs": True,
        "top_logprobs": 20,
        "max_tokens": 64,
    }
    with router_with_sims(tmp_path, config={"wire": {"transport": transport}}) as router:
        running = threading.Event()
        running.set()
        result: dict[str, object] = {}

        def big() -> None:
            try:
                started = time.perf_counter()
                reply = httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=300)
                result["seconds"] = time.perf_counter() - started
                result["reply"] = reply
            finally:
                running.clear()

        worker = threading.Thread(target=big)
        worker.start()
        latencies = poll_health(router, running)
        worker.join()

        reply = result["reply"]
        assert isinstance(reply, httpx.Response)
        assert reply.status_code == 200, reply.text[:500]
        choices = reply.json()["choices"]
        assert len(choices) == 128
        assert all(len(c["logprobs"]["content"][0]["top_logprobs"]) == 20 for c in choices)
        seconds = result["seconds"]
        assert isinstance(seconds, float)
        worst = max(latencies)
        print(f"{transport}: request {seconds:.2f}s, /health worst {worst:.3f}s")
        # Relative to the request (robust on a loaded machine): /health never waits for
        # most of it.
        assert worst < 0.4 * seconds, (worst, seconds)


def stalled_client(port: int, body: dict[str, object]) -> socket.socket:
    """A client that sends a streaming request and then never reads a byte."""
    payload = json.dumps(body).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: turnout\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect(("127.0.0.1", port))
    sock.sendall(head.encode() + payload)
    return sock


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_clients_that_stop_reading_do_not_grow_router_memory(
    tmp_path: Path, transport: str
) -> None:
    """20 clients ask for ~20 MB streams each and read nothing: the router's memory stays
    flat (the SSE send blocks, the request stops taking worker messages, and the worker's
    stream is paused by HTTP/2 flow control) instead of buffering every answer."""
    body = {
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
        "n": 6,
        "max_tokens": 7000,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 3,
    }
    config = {"wire": {"transport": transport}}
    with router_with_sims(tmp_path, sims=2, config=config) as router:
        # Warm up (tokenizer caches, connections), then take the baseline.
        warm = httpx.post(
            f"{router.base_url}/v1/chat/completions", json={**body, "max_tokens": 20}, timeout=60
        )
        assert warm.status_code == 200
        time.sleep(0.5)
        baseline = router.rss_mb()
        clients = [stalled_client(router.port, body) for _ in range(20)]
        try:
            growth: list[float] = []
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                growth.append(router.rss_mb() - baseline)
                assert growth[-1] < 100, f"router RSS grew by {growth[-1]:.0f} MB"
                time.sleep(0.5)
            print(f"{transport}: RSS {baseline:.0f} MB, growth peak {max(growth):.1f} MB")
        finally:
            for sock in clients:
                sock.close()
        # The abandoned streams are released: the router serves as before.
        reply = httpx.post(
            f"{router.base_url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "still there?"}]},
            timeout=60,
        )
        assert reply.status_code == 200
        assert reply.json()["choices"][0]["message"]["content"] == "still there?"
