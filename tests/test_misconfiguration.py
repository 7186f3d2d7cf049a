"""Misconfiguration that speaks: `turnout serve` / `turnout check` as a user runs them, in
subprocesses, with real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from turnout.demo_model import path as demo_path
from turnout.testing.processes import GroupProcess
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import HealthSettings, WorkerSpec, WorkersSettings

from .server.harness import free_port

TURNOUT = [sys.executable, "-m", "turnout"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TURNOUT, *args], capture_output=True, text=True, timeout=60, check=False
    )


def unreachable_worker() -> str:
    """The URL of a port nothing listens on."""
    return f"grpc://127.0.0.1:{free_port()}"


class Served:
    """A ``turnout serve`` process whose log lines are read as they come."""

    def __init__(self, *args: str) -> None:
        self.group = GroupProcess(
            [*TURNOUT, "serve", *args], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.process = self.group.proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        for stream in (self.process.stdout, self.process.stderr):
            threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.put(line)

    def wait_for(self, check: Callable[[str], bool], timeout: float = 60) -> str:
        """The first log line (seen before or arriving within ``timeout``) that passes ``check``."""
        for line in self.seen:
            if check(line):
                return line
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no such line; seen: {''.join(self.seen)}"
            with contextlib.suppress(queue.Empty):
                line = self.lines.get(timeout=min(left, 0.5))
                self.seen.append(line)
                if check(line):
                    return line
            assert self.process.poll() is None or not self.lines.empty(), (
                f"turnout exited ({self.process.returncode}): {''.join(self.seen)}"
            )

    def stop(self) -> None:
        self.group.stop(30)


@contextlib.contextmanager
def serving(*args: str) -> Iterator[Served]:
    served = Served(*args)
    try:
        yield served
    finally:
        served.stop()


@pytest.mark.parametrize("command", ["serve", "check"])
def test_missing_model_path_fails_naming_the_flag_and_the_path(
    command: str, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-model"
    result = run(command, "--model-path", str(missing), "--worker-urls", unreachable_worker())
    assert result.returncode == 2
    assert result.stderr == f"turnout: error: --model-path: {missing} does not exist\n"
    assert "ready" not in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["serve", "check"])
def test_bad_tokenizer_path_in_the_config_names_the_key(command: str, tmp_path: Path) -> None:
    config = tmp_path / "turnout.yaml"
    config.write_text(
        f"workers: [{{url: '{unreachable_worker()}', model: m}}]\n"
        f"models:\n  m: {{tokenizer_path: {tmp_path}}}\n"  # a directory without tokenizer.json
    )
    result = run(command, "--config", str(config))
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"turnout: error: models.m.tokenizer_path: {tmp_path} has no tokenizer.json"
    )
    assert "Traceback" not in result.stderr


def test_port_in_use_is_one_line_and_exit_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(
            "serve", "--port", str(port), "--worker-urls", unreachable_worker(),
            "--model-path", str(demo_path()),
        )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"turnout: error: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in line


def test_unreachable_worker_is_explained_in_logs_readiness_and_503s() -> None:
    port = free_port()
    worker = unreachable_worker()
    worker_id = worker.removeprefix("grpc://")
    base_url = f"http://127.0.0.1:{port}"
    with serving(
        "--port", str(port), "--worker-urls", worker, "--model-path", str(demo_path())
    ) as served:  # fmt: skip
        served.wait_for(lambda line: "turnout ready" in line)
        # The ready line comes once the socket is bound: a client can connect at once.
        socket.create_connection(("127.0.0.1", port), timeout=5).close()

        warning = served.wait_for(lambda line: "WARNING" in line and worker_id in line)
        assert "UNAVAILABLE" in warning

        ready = httpx.get(f"{base_url}/readiness", timeout=10)
        assert ready.status_code == 503
        pending = ready.json()["workers"][worker_id]
        assert pending["state"] == "pending"
        assert "UNAVAILABLE" in pending["reason"]
        assert "grpc://" not in ready.text

        client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(
                model="some-model", messages=[{"role": "user", "content": "hi"}]
            )
        assert raised.value.status_code == 503
        message = raised.value.body["message"]  # type: ignore[index]
        assert (
            message == f"no ready worker for model 'some-model' (1 registered: {worker_id} pending)"
        )


def test_check_warns_when_two_models_share_a_worker_url(tmp_path: Path) -> None:
    config = tmp_path / "turnout.yaml"
    port = free_port()
    config.write_text(
        "workers:\n"
        f"  - {{url: 'grpc://127.0.0.1:{port}', model: chat}}\n"
        f"  - {{url: 'grpc://localhost:{port}', model: embed}}\n"
    )
    result = run("check", "--config", str(config))
    assert result.returncode == 0
    assert "config OK" in result.stdout
    (warning,) = result.stderr.splitlines()
    assert warning.startswith("turnout: warning: workers[0] ")
    assert "workers[1]" in warning
    assert "'chat', 'embed'" in warning


def test_registry_warns_once_per_reason_and_about_a_worker_listed_twice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = unreachable_worker()
    settings = WorkersSettings(
        workers=[WorkerSpec(url=url, model="chat"), WorkerSpec(url=url, model="embed")],
        health=HealthSettings(interval_s=0.2, timeout_s=0.5, pending_interval_s=0.02),
    )

    async def probe_for_a_while() -> None:
        registry = WorkerRegistry(settings)
        await registry.start()
        try:
            await asyncio.sleep(0.5)  # many probes, all refused
        finally:
            await registry.stop()

    with caplog.at_level(logging.WARNING, logger="turnout.workers.registry"):
        asyncio.run(probe_for_a_while())
    messages = [r.getMessage() for r in caplog.records]
    assert any("already registered" in m and "embed gets no worker" in m for m in messages)
    refused = [m for m in messages if "is pending" in m]
    assert len(refused) == 1, messages
    assert "UNAVAILABLE" in refused[0]
