"""Graceful shutdown: ``turnout serve`` in a subprocess gets SIGTERM during active streams."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.server.harness import MODEL, free_port, run_router
from turnout.demo_model import path as demo_path
from turnout.server.shutdown import begin_drain_all
from turnout.sim import SimProcess, get_records

from .helpers import chat

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess("--delay-ms", "30", "--served-model-name", MODEL) as running:
        yield running


class Serve:
    """``python -m turnout serve`` with a config file, on a free port."""

    def __init__(self, tmp_path: Path, sim_url: str, grace_s: float) -> None:
        config = {
            "server": {"port": free_port(), "shutdown_grace_s": grace_s, "log_json": True},
            "workers": [{"url": sim_url, "model": MODEL}],
            "models": {MODEL: {"tokenizer_path": str(demo_path())}},
            "health": {"interval_s": 0.5, "pending_interval_s": 0.1},
        }
        path = tmp_path / "turnout.yaml"
        path.write_text(yaml.safe_dump(config))
        self.base_url = f"http://127.0.0.1:{config['server']['port']}"
        self.log = tmp_path / "turnout.log"
        self._log_file = self.log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "turnout", "serve", "--config", str(path)],
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def wait_ready(self, limit_s: float = 30.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.base_url}/readiness", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not ready in time:\n{self.log.read_text()}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for server in started:
        server.close()


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
    sim: SimProcess, serve: list[Serve], tmp_path: Path
) -> None:
    server = Serve(tmp_path, sim.url, grace_s=10)
    serve.append(server)
    server.wait_ready()
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


def test_streams_outliving_the_grace_period_are_aborted_on_the_worker(
    sim: SimProcess, serve: list[Serve], tmp_path: Path
) -> None:
    server = Serve(tmp_path, sim.url, grace_s=1)
    serve.append(server)
    server.wait_ready()
    stream = Streamer(server.base_url, 1000, "outlives-grace")  # 30 s of tokens
    stream.start()
    assert stream.first.wait(10)
    signalled = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    assert time.monotonic() - signalled < 6
    stream.join(5)
    assert not stream.is_alive()
    assert "[DONE]" not in stream.events

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
