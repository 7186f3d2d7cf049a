"""A real ``redis-server`` (Debian package ``redis-server``) on a free loopback port, and a
socket that accepts connections and never answers (a hung Redis).

Where ``redis-server`` is missing the tests that need it skip, and fail under CI (``.ci/run``
installs it)."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ci_skips import in_ci
from tests.server.harness import free_port


def redis_server_path() -> str:
    """The ``redis-server`` binary; skips the test (fails it under CI) when it is missing."""
    found = shutil.which("redis-server")
    if found is None:
        message = "redis-server is not installed (apt-get install redis-server)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


class RedisServer:
    """One ``redis-server`` process without persistence, logging to ``dir/redis.log``."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / "redis.log"
        self.proc = subprocess.Popen(
            [redis_server_path(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(directory),
             "--logfile", str(self.log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.wait_ready()

    def ping(self) -> bool:
        """True when the server answers ``PING``."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def wait_ready(self, limit_s: float = 20.0) -> None:
        deadline = time.monotonic() + limit_s
        while not self.ping():
            assert self.proc.poll() is None, f"redis-server exited: {self.log.read_text()}"
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)

    def pause(self) -> None:
        """Freeze the server: connections are still accepted, nothing is answered."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextlib.contextmanager
def silent_server(scheme: str = "redis") -> Iterator[str]:
    """A ``redis://`` (or ``<scheme>://``) URL whose server completes connections and never
    answers a byte."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # never accepted: the kernel completes the handshakes
        yield f"{scheme}://127.0.0.1:{listener.getsockname()[1]}/0"


def closed_port_url(scheme: str = "redis") -> str:
    """A ``redis://`` (or ``<scheme>://``) URL nobody listens on (connections are refused)."""
    return f"{scheme}://127.0.0.1:{free_port()}/0"
