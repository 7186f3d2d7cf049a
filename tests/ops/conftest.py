"""Fixtures of the ops tests: a simulated worker in its own process, ``turnout serve``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.harness import MODEL
from turnout.sim import SimProcess

from .helpers import Serve, StartServe
from .redis_server import RedisServer


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """A simulated worker process (30 ms per token) shared by a module's tests."""
    with SimProcess("--delay-ms", "30", "--served-model-name", MODEL) as running:
        yield running


@pytest.fixture
def serve(tmp_path: Path, sim: SimProcess) -> Iterator[StartServe]:
    """Start ``turnout serve`` in front of ``sim``: ``serve({"shutdown_grace_s": 1})``; it is
    ready when returned and killed at the end of the test."""
    started: list[Serve] = []

    def start(server: dict[str, Any] | None = None, *, ready: bool = True) -> Serve:
        running = Serve(tmp_path / str(len(started)), sim.url, server)
        started.append(running)
        if ready:
            running.wait_ready()
        return running

    yield start
    for running in started:
        running.close()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real ``redis-server`` on a free port shared by a module's tests (they keep apart with
    their own key prefixes); skipped where it is not installed, a failure under CI."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()
