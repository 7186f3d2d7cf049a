"""Fixtures of the Responses API tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ops.redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real ``redis-server`` shared by a module's tests (each router has its own key
    prefix); skipped where it is not installed, a failure under CI."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()
