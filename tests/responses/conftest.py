"""Fixtures of the Responses API tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from tests.ops.postgres_server import PostgresServer
from tests.ops.redis_server import RedisServer
from turnout.config import ResponsesConfig
from turnout.responses.storage import Storage, make_storage


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real ``redis-server`` shared by a module's tests (each router has its own key
    prefix); skipped where it is not installed, a failure under CI."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server shared by a module's tests (each router has its own key
    prefix, the namespace of its rows); skipped where it is not installed, a failure under
    CI."""
    server = PostgresServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=["memory", "redis", "postgres"])
def storage_url(request: pytest.FixtureRequest) -> str:
    """``responses.storage`` of each backend (the shared ones in the module's real server)."""
    if request.param == "memory":
        return "memory://"
    server: RedisServer | PostgresServer = request.getfixturevalue(f"{request.param}_server")
    return server.url


@asynccontextmanager
async def open_storage(url: str, **settings: Any) -> AsyncIterator[Storage]:
    """The stores of ``url`` with a key prefix of their own (tests share one server), and
    the other ``responses`` settings given; closed at the end."""
    section = ResponsesConfig(storage=url, key_prefix=f"test-{uuid.uuid4().hex[:12]}", **settings)
    storage = make_storage(section)
    try:
        yield storage
    finally:
        await storage.aclose()
