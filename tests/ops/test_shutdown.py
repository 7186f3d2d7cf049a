"""Graceful shutdown: ``turnout serve`` in a subprocess gets SIGTERM during active streams."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import threading
import time

import httpx

from tests.server.harness import run_router
from turnout.server.shutdown import begin_drain_all
from turnout.sim import SimProcess, get_records

from .helpers import StartServe, chat, scrape, value

CHAT = "/v1/chat/completions"


class Streamer(threading.Thread):
    """A streaming chat in a thread; ``first`` is set when its first event arrived."""

    def __init__(self, base_url: str, tokens: int, request_id: str) -> None:
        super().__init__(daemon=True)
        self.url = f"{base_url}{CHAT}"
        self.body = chat(" ".join(["word"] * 80), stream=True, max_tokens=tokens)
        self.headers = {"x-request-id": request_id}
        self.first = threading.Event()
        self.events: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.stream(
                "POST", self.url, json=self.body, headers=self.headers, timeout=30
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append(line[6:])
                        self.first.set()
        except BaseException as exc:
            self.error = exc
        finally:
            self.first.set()


def test_sigterm_lets_active_streams_finish_and_refuses_new_work(
    serve: StartServe,
) -> None:
    server = serve({"shutdown_grace_s": 10})
    streams = [Streamer(server.base_url, 30, f"drain-{i}") for i in range(2)]
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.first.wait(10)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    try:
        refused = httpx.post(f"{server.base_url}{CHAT}", json=chat(), timeout=5).status_code
    except httpx.HTTPError:
        refused = None  # the listener is closed: also a refusal
    assert refused in (None, 503)
    for stream in streams:
        stream.join(15)
        assert stream.error is None
        assert stream.events[-1] == "[DONE]"
        last = json.loads(stream.events[-2])
        assert last["choices"][0]["finish_reason"] == "length"
    assert server.proc.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    assert time.monotonic() - signalled < 8
    text = server.log.read_text()
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert any("turnout ready on" in line["message"] for line in lines)
    access = [line for line in lines if line["logger"] == "turnout.access"]
    assert {line.get("request_id") for line in access} >= {"drain-0", "drain-1"}


def test_streams_outliving_the_grace_period_end_with_an_error_event_and_abort_on_the_worker(
    sim: SimProcess, serve: StartServe
) -> None:
    server = serve({"shutdown_grace_s": 1})
    stream = Streamer(server.base_url, 1000, "outlives-grace")  # 30 s of tokens
    stream.start()
    assert stream.first.wait(10)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    assert time.monotonic() - signalled < 6
    stream.join(5)
    assert not stream.is_alive()
    assert stream.error is None
    assert stream.events[-1] == "[DONE]"
    error = json.loads(stream.events[-2])["error"]
    assert error["code"] == "shutting_down"
    assert error["type"] == "service_unavailable_error"

    records = asyncio.run(get_records(sim.url))
    outcomes = [v for k, v in records["outcomes"].items() if k.startswith("outlives-grace-")]
    assert outcomes, records
    assert outcomes[0] in ("abort", "cancelled"), records
    assert records["running"] == 0


def test_draining_fails_readiness_and_new_generation_but_not_liveness() -> None:
    with run_router(sims=1) as router:
        begin_drain_all()
        deadline = time.monotonic() + 5
        while httpx.get(f"{router.base_url}/readiness", timeout=5).status_code != 503:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        ready = httpx.get(f"{router.base_url}/readiness", timeout=5)
        assert ready.json()["status"] == "not ready"
        refused = httpx.post(f"{router.base_url}{CHAT}", json=chat(), timeout=5)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "shutting_down"
        assert httpx.get(f"{router.base_url}/health", timeout=5).status_code == 200


def test_requests_outliving_the_grace_period_get_a_json_503(serve: StartServe) -> None:
    server = serve({"shutdown_grace_s": 1})
    answers: list[httpx.Response | BaseException] = []

    def ask() -> None:
        body = chat(" ".join(["word"] * 80), max_tokens=1000)  # 30 s of tokens
        try:
            answers.append(httpx.post(f"{server.base_url}{CHAT}", json=body, timeout=30))
        except BaseException as exc:
            answers.append(exc)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    deadline = time.monotonic() + 10
    while value(scrape(server.base_url), "turnout_requests_in_flight", route=CHAT) < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)  # it reached the worker
    server.proc.send_signal(signal.SIGTERM)
    asker.join(15)
    assert server.proc.wait(15) in (0, -signal.SIGTERM)
    assert len(answers) == 1
    answer = answers[0]
    assert isinstance(answer, httpx.Response), answer
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json()["error"]["code"] == "shutting_down"


def test_a_connection_made_just_before_shutdown_gets_an_answer(serve: StartServe) -> None:
    """A client that connected before the listener closed, but whose request arrives after
    the shutdown began, is answered (503 while draining) rather than disconnected."""
    server = serve({"shutdown_grace_s": 5})
    stream = Streamer(server.base_url, 60, "keeps-it-up")  # the router drains for ~2 s
    stream.start()
    assert stream.first.wait(10)
    url = httpx.URL(server.base_url)
    with socket.create_connection((url.host, url.port), timeout=5) as early:
        time.sleep(0.2)  # accepted by the server
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the shutdown has begun
        body = json.dumps(chat()).encode()
        early.sendall(
            b"POST " + CHAT.encode() + b" HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
            b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        answer = b""
        while chunk := early.recv(65536):
            answer += chunk
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 503"), answer
    assert b"connection: close" in head
    stream.join(15)
    assert stream.events[-1] == "[DONE]"
