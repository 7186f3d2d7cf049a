"""Misconfiguration that speaks: `turnout serve` / `turnout check` as a user runs them, in
subprocesses, with real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import shutil
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
from turnout.sim import SimProcess
from turnout.testing.processes import GroupProcess
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import HealthSettings, WorkerSpec, WorkersSettings

from .plugin_fixtures import make_distribution
from .server.harness import free_port

TURNOUT = [sys.executable, "-m", "turnout"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*TURNOUT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=None if env is None else {**os.environ, **env},
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


def _without_harmony(tmp_path: Path) -> dict[str, str]:
    """An environment in which the ``harmony`` extra (openai-harmony) is not installed."""
    site = tmp_path / "no-harmony"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['openai_harmony'] = None\n")
    return {"PYTHONPATH": str(site)}


def _model_copy(tmp_path: Path, tokenizer_json: str | None = None) -> Path:
    model = tmp_path / "model"
    shutil.copytree(demo_path(), model, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    if tokenizer_json is not None:
        (model / "tokenizer.json").write_text(tokenizer_json)
    return model


@pytest.mark.parametrize("command", ["check", "serve"])
@pytest.mark.parametrize(
    "case", ["harmony without its extra", "not a tokenizer", "policy params", "metrics port taken"]
)
def test_check_refuses_what_serve_cannot_start_in_one_line(
    command: str, case: str, tmp_path: Path
) -> None:
    model = f"{{tokenizer_path: '{demo_path()}'}}"
    env = None
    args: list[str] = []
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    if case == "harmony without its extra":
        model = f"{{tokenizer_path: '{demo_path()}', chat_format: harmony}}"
        env = _without_harmony(tmp_path)
        expected = "models.m.chat_format: chat format 'harmony' is unavailable: "
    elif case == "not a tokenizer":
        directory = _model_copy(tmp_path, tokenizer_json='{"version": "1.0"}')
        model = f"{{tokenizer_path: '{directory}'}}"
        expected = f"models.m.tokenizer_path: {directory}/tokenizer.json: cannot load tokenizer"
    elif case == "policy params":
        model = f"{{tokenizer_path: '{demo_path()}', policy: {{name: random, params: {{sed: 1}}}}}}"
        expected = "models.m.policy.params: policy 'random' takes seed, got sed"
    else:
        args = ["--metrics-port", str(taken.getsockname()[1])]
        expected = f"--metrics-port: cannot listen on 127.0.0.1:{taken.getsockname()[1]}: "
    config = tmp_path / "turnout.yaml"
    config.write_text(
        f"workers: [{{url: '{unreachable_worker()}', model: m}}]\nmodels: {{m: {model}}}\n"
    )
    with taken:
        result = run(command, "--config", str(config), "--port", "0", *args, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"turnout: error: {expected}"), line
    assert "ready" not in result.stdout


def test_harmony_hint_says_what_to_install(tmp_path: Path) -> None:
    config = tmp_path / "turnout.yaml"
    config.write_text(f"models: {{m: {{tokenizer_path: '{demo_path()}', chat_format: harmony}}}}\n")
    result = run("check", "--config", str(config), env=_without_harmony(tmp_path))
    assert result.returncode == 2
    assert "pip install 'turnout[harmony]'" in result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--tool-parser", "qwem"], "--tool-parser: unknown tool parser 'qwem'; valid names: "),
        (["--worker-urls", "ftp://h:1"], "--worker-urls ftp://h:1: expected grpc://host:port"),
        (["--policy", "round_robin", "--decode-policy", "nope"], "--decode-policy: unknown policy"),
        (["--api-key", " "], "--api-key: Expected `str` matching"),
    ],
)
def test_errors_from_flags_name_the_flag_in_one_line(args: list[str], expected: str) -> None:
    result = run("check", *args)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"turnout: error: {expected}"), line
    assert not any(key in line for key in ("defaults.", "server.", "workers["))


def test_sim_on_a_taken_port_says_why_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run("sim", "--port", str(port))
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"turnout sim: error: cannot listen on 127.0.0.1:{port}: ")
    assert "in use" in line


def test_a_worker_whose_model_files_are_not_here_gets_a_503_naming_the_model_and_fix(
    tmp_path: Path,
) -> None:
    model = _model_copy(tmp_path)
    port = free_port()
    with SimProcess("--model-path", str(model), "--served-model-name", "far/model") as sim:
        # The worker has its files; this host does not (a directory without a tokenizer).
        (model / "tokenizer.json").unlink()
        with serving("--port", str(port), "--worker-urls", sim.url) as served:
            served.wait_for(lambda line: "turnout ready" in line)
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0
            )
            with pytest.raises(openai.APIStatusError) as raised:
                client.chat.completions.create(
                    model="far/model", messages=[{"role": "user", "content": "hi"}]
                )
            served.wait_for(lambda line: "tokenizer.json" in line)  # the path: in the log only
    assert raised.value.status_code == 503
    body = raised.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_unavailable"
    assert body["message"].startswith("model 'far/model' cannot be served: ")
    assert "set models.far/model.tokenizer_path to a local copy" in body["message"]
    assert str(tmp_path) not in body["message"]


STICKY_PLUGIN = """
import turnout


class Sticky:
    def __init__(self, *, window: int = 10) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")

    def select(self, request, candidates):
        return candidates[0]


@turnout.hookimpl
def turnout_register_policies(register):
    register("first_pick", Sticky)
"""


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ("{windw: 3}", "models.m.policy.params: policy 'first_pick' takes window, got windw"),
        (
            "{window: 0}",
            "models.m.policy.params: policy 'first_pick': window must be at least 1, got 0",
        ),
    ],
)
def test_check_creates_a_plugin_policy_with_its_params(
    params: str, expected: str, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    make_distribution(site, "turnout-sticky", "turnout_sticky", STICKY_PLUGIN)
    config = tmp_path / "turnout.yaml"
    config.write_text(f"models: {{m: {{policy: {{name: first_pick, params: {params}}}}}}}\n")
    result = run("check", "--config", str(config), env={"PYTHONPATH": str(site)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == f"turnout: error: {expected}\n"
