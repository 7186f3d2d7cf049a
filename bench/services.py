"""Start and stop what the benchmark measures: simulated workers, turnout, smg.

Every service is a child process on 127.0.0.1 with a free port; ``Router.pid`` is the root of
the process tree whose CPU and RSS are accounted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench import procfs

__all__ = [
    "Router",
    "StartError",
    "find_smg",
    "free_port",
    "smg_version",
    "start_sims",
    "start_smg",
    "start_turnout",
    "stop_process",
]

MODEL = "turnout-demo"


class StartError(RuntimeError):
    """A service did not come up; the message says which and shows its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Router:
    """A router process serving ``url`` (``http://127.0.0.1:PORT``)."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    version: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: More routers of the same target (replicas side by side); stopped with this one.
    replicas: list[Router] = field(default_factory=list)

    @property
    def urls(self) -> list[str]:
        """This router's URL and its replicas'."""
        return [self.url, *(replica.url for replica in self.replicas)]

    @property
    def pid(self) -> int:
        """Root of the router's process tree."""
        return self.proc.pid

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the router's log."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Stop the router and its replicas (bounded)."""
        stop_process(self.proc, timeout=15.0)
        for replica in self.replicas:
            replica.stop()


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as answer:
        return json.loads(answer.read())


def _post_json(url: str, body: dict[str, Any], timeout: float = 10.0) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.loads(answer.read())


def wait_router_ready(router: Router, timeout: float = 60.0) -> None:
    """Wait until ``/v1/models`` lists the model and one chat completion succeeds."""
    deadline = time.monotonic() + timeout
    problem = "no answer yet"
    while time.monotonic() < deadline:
        if router.proc.poll() is not None:
            raise StartError(
                f"{router.name} exited with status {router.proc.returncode}:\n" + router.log_tail()
            )
        try:
            models = _get_json(router.url + "/v1/models")
            if not any(m.get("id") == MODEL for m in models.get("data", [])):
                problem = f"model {MODEL!r} not listed yet"
            else:
                answer = _post_json(
                    router.url + "/v1/chat/completions",
                    {
                        "model": MODEL,
                        "messages": [{"role": "user", "content": "ready?"}],
                        "max_tokens": 4,
                    },
                )
                if answer.get("choices"):
                    return
                problem = f"unexpected answer {answer!r:.200}"
        except (OSError, urllib.error.URLError, ValueError) as exc:
            problem = repr(exc)
        time.sleep(0.3)
    router.stop()
    raise StartError(
        f"{router.name} not ready within {timeout:g}s ({problem}):\n" + router.log_tail()
    )


def _spawn(name: str, argv: list[str], log_dir: Path, port: int, version: str) -> Router:
    log_path = log_dir / f"{name}.log"
    log: IO[bytes] = log_path.open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    finally:
        log.close()
    return Router(name, proc, f"http://127.0.0.1:{port}", log_path, version)


def start_turnout(
    worker_urls: list[str],
    log_dir: Path,
    *,
    policy: str,
    processes: int = 1,
    extra: Sequence[str] = (),
    name: str = "turnout",
    python: str = sys.executable,
    worker_dp_size: int | None = None,
    config: Mapping[str, Any] | None = None,
) -> Router:
    """``turnout serve`` in front of ``worker_urls`` with the demo model's tokenizer;
    ``extra`` flags are appended (parsers); ``name`` names the log file. ``worker_dp_size``
    overrides the DP size every worker reports (1: ranks summed, each worker's own scheduler
    picks the rank); the workers then go in a config file in ``log_dir``, with ``config``'s
    sections (``tracing``) if any."""
    from turnout import __version__, demo_model

    port = free_port()
    workers = ["--worker-urls", *worker_urls] if worker_urls else []
    settings: dict[str, Any] = dict(config or {})
    if worker_dp_size is not None:
        settings["workers"] = [{"url": url, "dp_size": worker_dp_size} for url in worker_urls]
        workers = []
    if settings:
        path = log_dir / f"{name}-config.yaml"
        path.write_text(json.dumps(settings))  # JSON is YAML
        workers += ["--config", str(path)]
    argv = [
        python,
        "-m",
        "turnout",
        "serve",
        *workers,
        "--model-path",
        str(demo_model.path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--policy",
        policy,
        "--log-level",
        "warning",
        "--processes",
        str(processes),
        *extra,
    ]
    router = _spawn(name, argv, log_dir, port, __version__)
    wait_router_ready(router)
    if processes > 1:
        wait_serving_processes(router, processes, worker_urls)
    return router


def wait_serving_processes(
    router: Router, processes: int, worker_urls: Sequence[str], timeout: float = 60.0
) -> None:
    """Wait until ``processes`` processes of the router's tree are connected to the workers.

    One answer proves only that one serving process is up; the load generator's persistent
    connections, opened right after, would all land on the processes ready by then. A serving
    process connects to every worker as soon as it has started (its health checks).
    """
    ports = [int(url.rsplit(":", 1)[1]) for url in worker_urls]
    deadline = time.monotonic() + timeout
    while True:
        counts = procfs.connections_by_pid(procfs.tree_pids(router.pid), remote_ports=ports)
        connected = sum(1 for count in counts.values() if count)
        if connected >= processes:
            return
        if time.monotonic() > deadline or router.proc.poll() is not None:
            router.stop()
            raise StartError(
                f"{router.name}: {connected} of {processes} serving processes connected to the "
                f"workers within {timeout:g}s:\n" + router.log_tail()
            )
        time.sleep(0.2)


def find_smg() -> str | None:
    """The ``smg`` command next to this Python, else on PATH; None when not installed."""
    beside = Path(sys.executable).parent / "smg"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("smg")


def smg_version() -> str:
    """Installed version of the ``smg`` distribution ("" if unknown)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("smg")
    except PackageNotFoundError:
        return ""


def start_smg(
    worker_urls: list[str],
    log_dir: Path,
    *,
    policy: str,
    command: str,
    extra: Sequence[str] = (),
    name: str = "smg",
) -> Router:
    """``smg launch`` in front of ``worker_urls``; the tokenizer directory has a config.json,
    so smg makes no hub look-ups. ``extra`` flags are appended (parsers)."""
    from turnout import demo_model
    from turnout.wire.engines import split_scheme

    port = free_port()
    argv = [
        command,
        "launch",
        "--worker-urls",
        # smg tells a worker's engine by itself, from a plain grpc:// URL.
        *(split_scheme(url)[1] for url in worker_urls),
        "--tokenizer-path",
        str(demo_model.path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(free_port()),
        "--policy",
        policy,
        "--log-level",
        "warn",
        *extra,
    ]
    router = _spawn(name, argv, log_dir, port, smg_version())
    wait_router_ready(router)
    return router


@contextlib.contextmanager
def start_sims(
    count: int, tokens_per_chunk: int = 1, args_for: Callable[[int], list[str]] | None = None
) -> Any:
    """``count`` simulated workers as child processes; yields them. Worker ``i`` gets the flags
    ``args_for(i)`` (default: zero delay, ``tokens_per_chunk`` tokens per message)."""
    from turnout.sim import SimProcess

    sims: list[Any] = []
    try:
        for i in range(count):
            flags = args_for(i) if args_for else ["--tokens-per-chunk", str(tokens_per_chunk)]
            sim = SimProcess(*flags)
            sim.start()
            sims.append(sim)
        yield sims
    finally:
        for sim in sims:
            sim.stop()
