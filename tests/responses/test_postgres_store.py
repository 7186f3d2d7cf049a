"""The PostgreSQL store against a real server: the schema made on an empty database and
migrated once however many routers start together, a restart that changes nothing, a schema
newer than this turnout refused; expired rows swept out; routers apart by their key prefix;
a database that is down, hung or stopped under a running store fails each call within its
deadline (:class:`StoreUnavailable`), and is used again once back; the config's URLs, and a
clear start-up error without asyncpg."""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import time
import uuid
from typing import Any

import asyncpg
import pytest

from tests.ops.postgres_server import PostgresServer
from tests.ops.redis_server import closed_port_url, silent_server
from turnout.config import ResponsesConfig
from turnout.config.loading import build_config
from turnout.errors import ConfigError, StartupError
from turnout.responses import postgres
from turnout.responses.postgres import (
    PostgresConversationStore,
    PostgresLink,
    PostgresResponseStore,
)
from turnout.responses.postgres_schema import MIGRATIONS, migrate
from turnout.responses.shared import StoreUnavailable
from turnout.responses.storage import make_storage
from turnout.responses.store import StoredResponse

from .conftest import open_storage
from .test_conversation_store import head, item


def kept(response_id: str) -> StoredResponse:
    return StoredResponse({"id": response_id, "output": []}, [{"id": f"in_{response_id}"}])


def empty_database(server: PostgresServer) -> str:
    """The URL of a new, empty database on ``server``."""
    name = f"db_{uuid.uuid4().hex[:12]}"
    server.psql(f"CREATE DATABASE {name}")
    return server.url.rsplit("/", 1)[0] + f"/{name}"


def versions(server: PostgresServer, url: str) -> list[int]:
    listed = server.psql_in(url, "SELECT version FROM turnout_schema_version ORDER BY 1")
    return [int(line) for line in listed.split()]


def link(url: str, **settings: Any) -> PostgresLink:
    section = ResponsesConfig(storage=url, key_prefix=f"test-{uuid.uuid4().hex[:12]}", **settings)
    return PostgresLink(section)


async def test_an_empty_database_is_migrated_once_by_routers_starting_together(
    postgres_server: PostgresServer,
) -> None:
    url = empty_database(postgres_server)
    links = [link(url, timeout_s=5) for _ in range(4)]
    try:
        stores = [PostgresResponseStore(one) for one in links]
        await asyncio.gather(*(store.put(kept(f"resp_{n}")) for n, store in enumerate(stores)))
        assert versions(postgres_server, url) == list(range(1, len(MIGRATIONS) + 1))
    finally:
        for one in links:
            await one.aclose()
    # A restart: nothing to migrate, what was kept is still there.
    async with open_storage(url) as storage:
        await storage.responses.put(kept("resp_again"))
        assert await storage.responses.get("resp_again") == kept("resp_again")
    assert versions(postgres_server, url) == list(range(1, len(MIGRATIONS) + 1))


async def test_migrations_apply_in_order_and_only_once(postgres_server: PostgresServer) -> None:
    url = empty_database(postgres_server)
    connection = await asyncpg.connect(url)
    try:
        assert await migrate(connection) == list(range(1, len(MIGRATIONS) + 1))
        assert await migrate(connection) == []
        later = (*MIGRATIONS, "ALTER TABLE turnout_responses ADD COLUMN note text")
        assert await migrate(connection, later) == [len(later)]
        assert await migrate(connection, later) == []
        # A migration that fails leaves the database as it was.
        broken = (*later, "CREATE TABLE turnout_x (a int); SELECT * FROM no_such_table")
        with pytest.raises(asyncpg.UndefinedTableError):
            await migrate(connection, broken)
        assert await connection.fetchval("SELECT to_regclass('turnout_x')") is None
        assert await connection.fetchval("SELECT max(version) FROM turnout_schema_version") == 2
    finally:
        await connection.close()


async def test_a_schema_newer_than_turnout_is_refused(
    postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = empty_database(postgres_server)
    postgres_server.psql_in(
        url,
        "CREATE TABLE turnout_schema_version (version int PRIMARY KEY, applied_at timestamptz);"
        " INSERT INTO turnout_schema_version VALUES (99, now())",
    )
    async with open_storage(url) as storage:
        with pytest.raises(StoreUnavailable):
            await storage.responses.get("resp_1")
    assert any("newer than this turnout" in r.getMessage() for r in caplog.records)


async def test_writes_sweep_expired_rows_out(
    postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres, "SWEEP_BATCH", 2)  # a sweep deletes batch after batch
    short = link(postgres_server.url, ttl_s=0.2)
    namespace = short.namespace
    try:
        store = PostgresResponseStore(short)
        for n in range(5):
            await store.put(kept(f"resp_{n}"))
        await PostgresConversationStore(short).create(head("conv_1"), [item("i1")])
    finally:
        await short.aclose()
    count = " + ".join(
        f"(SELECT count(*) FROM {table} WHERE namespace = '{namespace}')"
        for table in ("turnout_responses", "turnout_response_items", "turnout_conversation_items")
    )
    count = f"SELECT {count}"
    assert int(postgres_server.psql(count)) == 11
    await asyncio.sleep(0.4)
    # Another router's first write sweeps out every namespace's expired rows.
    other = link(postgres_server.url)
    try:
        await PostgresResponseStore(other).put(kept("resp_other"))
        deadline = time.monotonic() + 10
        while int(postgres_server.psql(count)) != 0:
            assert time.monotonic() < deadline, "expired rows were never swept out"
            await asyncio.sleep(0.05)
        assert await other.sweep() == 0
    finally:
        await other.aclose()


async def test_routers_with_other_key_prefixes_do_not_see_each_other(
    postgres_server: PostgresServer,
) -> None:
    async with open_storage(postgres_server.url) as a, open_storage(postgres_server.url) as b:
        await a.responses.put(kept("resp_1"))
        await a.conversations.create(head("conv_1"), [])
        assert await b.responses.get("resp_1") is None
        assert await b.responses.holding("in_resp_1") is None
        assert await b.conversations.head("conv_1") is None
        assert not await b.responses.delete("resp_1")
        assert await a.responses.get("resp_1") == kept("resp_1")


@pytest.mark.parametrize("hung", [False, True])
async def test_an_unreachable_database_fails_each_call_within_its_deadline(hung: bool) -> None:
    with silent_server("postgres") as silent:
        url = silent if hung else closed_port_url("postgres")
        async with open_storage(url, timeout_s=0.3) as storage:
            started = time.monotonic()
            for call in (
                storage.responses.get("resp_1"),
                storage.responses.put(kept("resp_1")),
                storage.conversations.head("conv_1"),
                storage.conversations.append("conv_1", [item("i1")]),
            ):
                one = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    await call
                assert time.monotonic() - one < 0.3 + 0.7
            assert time.monotonic() - started < 4 * (0.3 + 0.7)


async def test_a_database_stopped_under_a_store_fails_calls_then_is_used_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = PostgresServer()
    try:
        async with open_storage(server.url, timeout_s=0.5) as storage:
            await storage.responses.put(kept("resp_1"))
            caplog.set_level(logging.WARNING, logger="turnout.responses.store")
            server.stop()
            for _ in range(5):
                started = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    await storage.responses.get("resp_1")
                assert time.monotonic() - started < 1.5
            server.start()
            deadline = time.monotonic() + 20
            while True:
                try:
                    assert await storage.responses.get("resp_1") == kept("resp_1")
                    break
                except StoreUnavailable:
                    assert time.monotonic() < deadline, "the database was never used again"
                    await asyncio.sleep(0.2)
            assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        server.close()


def test_the_config_takes_postgres_urls() -> None:
    for url in ("postgres://u:p@db:5432/turnout", "postgresql://u@db/turnout"):
        assert build_config({"responses": {"storage": url}}).responses.storage == url
    with pytest.raises(ConfigError, match=r"responses\.storage"):
        build_config({"responses": {"storage": "mysql://db/turnout"}})


async def test_a_query_that_hangs_fails_within_its_deadline(
    postgres_server: PostgresServer,
) -> None:
    # Another session holds the table: the store's statements wait on its lock, mid-query.
    async with open_storage(postgres_server.url, timeout_s=0.3) as storage:
        await storage.responses.put(kept("resp_1"))
        holder = await asyncpg.connect(postgres_server.url)
        try:
            locked = holder.transaction()
            await locked.start()
            await holder.execute("LOCK TABLE turnout_responses IN ACCESS EXCLUSIVE MODE")
            for _ in range(2):
                started = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    await storage.responses.get("resp_1")
                assert time.monotonic() - started < 0.3 + 0.7
            await locked.rollback()
        finally:
            await holder.close()
        # The connections whose queries were cancelled are not handed out broken.
        for _ in range(3):
            assert await storage.responses.get("resp_1") == kept("resp_1")


def test_without_asyncpg_the_router_does_not_start_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "asyncpg" else real(name, *a)
    )
    section = ResponsesConfig(storage="postgres://turnout:s3cret@db/turnout")
    with pytest.raises(StartupError, match=r"turnout\[postgres\]") as raised:
        make_storage(section)
    assert "s3cret" not in str(raised.value)


async def test_a_hung_database_costs_a_call_its_deadline_not_more(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Every process of the server frozen: pooled connections get no answer, and nor would
    # the cancellation of their queries (a call must not wait for it past its deadline).
    server = PostgresServer()
    try:
        async with open_storage(server.url, timeout_s=1.0) as storage:
            await asyncio.gather(*(storage.responses.put(kept(f"resp_{n}")) for n in range(4)))
            caplog.set_level(logging.WARNING, logger="turnout.responses.store")
            server.pause()
            waits = []
            for _ in range(6):
                started = time.monotonic()
                with pytest.raises(StoreUnavailable):
                    await storage.responses.get("resp_1")
                waits.append(time.monotonic() - started)
            # The first three wait their deadline; then the breaker fails calls at once.
            assert all(0.9 <= wait < 1.5 for wait in waits[:3]), waits
            assert all(wait < 0.1 for wait in waits[3:]), waits
            server.resume()
            deadline = time.monotonic() + 20
            while True:
                try:
                    assert await storage.responses.get("resp_1") == kept("resp_1")
                    break
                except StoreUnavailable:
                    assert time.monotonic() < deadline, "the database was never used again"
                    await asyncio.sleep(0.2)
            assert any("reachable again" in r.getMessage() for r in caplog.records)
    finally:
        server.close()
