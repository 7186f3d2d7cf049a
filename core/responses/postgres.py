"""Responses and conversations kept in PostgreSQL (asyncpg), shared by every router on the
database with the same ``responses.key_prefix``.

:class:`PostgresLink` is the database of a router's stores: a bounded connection pool opened
as the serving process starts (or on first use), the schema created and migrated then
(:mod:`turnout.responses.postgres_schema`), every call under a breaker and the deadline
``responses.timeout_s`` (a database that fails or misses it:
:class:`~turnout.responses.shared.StoreUnavailable`, a 503). Rows carry their expiry (the
database's clock, shared by every router): expired ones are never read, and writes sweep them
out now and then.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec

from turnout.config import ResponsesConfig
from turnout.errors import StartupError
from turnout.responses.breaker import Breaker
from turnout.responses.conversations import ConversationHead, ConversationTooLarge
from turnout.responses.items import Item
from turnout.responses.postgres_schema import migrate
from turnout.responses.shared import guarded
from turnout.responses.store import StoredResponse, fits, item_ids

log = logging.getLogger("turnout.responses.store")

T = TypeVar("T")

#: Connections to PostgreSQL per serving process (a call holds one for its few statements).
MAX_CONNECTIONS = 10
#: Deadline of opening the pool and migrating the schema (a request waits for it only its own
#: deadline; the migration goes on).
OPEN_TIMEOUT_S = 30.0
#: Expired rows are swept out at most this often per serving process, on a write.
SWEEP_EVERY_S = 60.0
#: Rows one statement of a sweep deletes (short statements: locks held briefly).
SWEEP_BATCH = 1000
#: Deadline of one sweep (the rest waits for the next).
SWEEP_TIMEOUT_S = 30.0


class PostgresLink:
    """The PostgreSQL database named by ``config.storage``
    (``postgres://user:password@host:port/database`` or ``postgresql://…``)."""

    def __init__(self, config: ResponsesConfig) -> None:
        if importlib.util.find_spec("asyncpg") is None:
            raise StartupError(  # (not the URL: it may hold a password)
                "responses.storage is a PostgreSQL URL: install the PostgreSQL client with "
                "pip install 'turnout[postgres]'"
            )
        self._dsn = config.storage
        #: Fails calls at once while the database keeps failing or hanging.
        self._breaker = Breaker("response store")
        self.namespace = config.key_prefix
        self.ttl_s = config.ttl_s
        self.max_bytes = config.max_bytes
        self.timeout_s = config.timeout_s
        self._opening: asyncio.Task[Any] | None = None
        self._last_sweep = -math.inf
        self._sweeps: set[asyncio.Task[int]] = set()

    async def call(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """``work`` on a pooled connection (an asyncpg ``Connection``), under the breaker and
        the deadline."""
        result: T = await guarded(self._breaker, self._run(work), self.timeout_s)
        return result

    async def transaction(self, work: Callable[[Any], Awaitable[T]]) -> T:
        """``work`` in one transaction (rolled back when it raises)."""

        async def within(connection: Any) -> T:
            async with connection.transaction():
                return await work(connection)

        return await self.call(within)

    def wrote(self) -> None:
        """Note a write: sweep expired rows out if the last sweep is long enough ago."""
        now = time.monotonic()
        if now - self._last_sweep < SWEEP_EVERY_S:
            return
        self._last_sweep = now
        task = asyncio.create_task(self.sweep())
        self._sweeps.add(task)
        task.add_done_callback(self._sweeps.discard)

    async def sweep(self) -> int:
        """Delete expired rows (every namespace's) in batches until none is left or
        ``SWEEP_TIMEOUT_S`` has passed; how many. Not under the breaker nor the deadline of
        a call: a slow sweep fails no request. One that fails is logged, the next goes on."""
        deleted = 0
        try:
            async with asyncio.timeout(SWEEP_TIMEOUT_S):
                pool = await self._pool()
                async with pool.acquire() as connection:
                    for table in ("turnout_responses", "turnout_conversations"):
                        batch = SWEEP_BATCH
                        while batch == SWEEP_BATCH:
                            status: str = await connection.execute(
                                f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid"
                                f" FROM {table} WHERE expires_at <= now() LIMIT {SWEEP_BATCH}))"
                            )
                            batch = int(status.rsplit(" ", 1)[-1])
                            deleted += batch
        except Exception as exc:
            log.info("PostgreSQL store: sweeping expired rows out stopped (%r)", exc)
        return deleted

    async def aclose(self) -> None:
        """Stop sweeping and close the connections (bounded)."""
        for task in list(self._sweeps):
            task.cancel()
        opening, self._opening = self._opening, None
        if opening is None:
            return
        if not opening.done():
            opening.cancel()
            return
        if opening.cancelled() or opening.exception() is not None:
            return
        pool = opening.result()
        try:
            async with asyncio.timeout(self.timeout_s + 1.0):
                await pool.close()
        except Exception:
            pool.terminate()

    async def _run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        pool = await self._pool()
        connection = await pool.acquire(timeout=self.timeout_s)
        try:
            return await work(connection)
        except BaseException:
            # Cut short by the deadline (or failed): the connection's state is unknown, and
            # waiting for a hung server to take a cancellation would outlast the deadline.
            connection.terminate()
            raise
        finally:
            await pool.release(connection)

    def open(self) -> asyncio.Task[Any]:
        """Open the pool and migrate the schema, unless done or under way (a failed opening
        is tried again): the serving process's start, and each call until it succeeds."""
        opening = self._opening
        if opening is None or (
            opening.done() and (opening.cancelled() or opening.exception() is not None)
        ):
            opening = self._opening = asyncio.create_task(self._open())
            opening.add_done_callback(_retrieved)
        return opening

    async def _pool(self) -> Any:
        """The pool: calls share its opening and wait for it within their own deadline."""
        return await asyncio.shield(self.open())

    async def _open(self) -> Any:
        import asyncpg

        async with asyncio.timeout(OPEN_TIMEOUT_S):
            pool = await asyncpg.create_pool(
                self._dsn,
                min_size=0,
                max_size=MAX_CONNECTIONS,
                timeout=self.timeout_s,  # of connecting
                max_inactive_connection_lifetime=60.0,
                # The calls leave no session state behind (no SET, LISTEN or session lock):
                # no reset statement, one round trip less per call.
                reset=_keep_session,
            )
            try:
                async with pool.acquire() as connection:
                    applied = await migrate(connection)
            except BaseException:
                pool.terminate()
                raise
        if applied:
            log.info("PostgreSQL store: schema migrated to version %d", applied[-1])
        return pool


async def _keep_session(connection: Any) -> None:
    """A connection back in the pool needs no reset (see :meth:`PostgresLink._open`)."""


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a failure of the pool's opening as seen (its waiters may all have given up)."""
    if not task.cancelled():
        task.exception()


_encode = msgspec.json.Encoder().encode
_decode_response = msgspec.json.Decoder(StoredResponse).decode
_decode_head = msgspec.json.Decoder(ConversationHead).decode
_decode_item = msgspec.json.Decoder(dict[str, Any]).decode

_EXPIRY = "now() + make_interval(secs => {})"

#: Keeps a response (again: replaced) and makes it the holder of its items, in one statement:
#: $1 namespace, $2 id, $3 JSON, $4 ttl_s, $5 item ids.
_PUT = (
    "WITH kept AS ("
    " INSERT INTO turnout_responses (namespace, id, data, expires_at)"
    f" VALUES ($1, $2, $3, {_EXPIRY.format('$4')})"
    " ON CONFLICT (namespace, id) DO UPDATE"
    " SET data = excluded.data, expires_at = excluded.expires_at RETURNING id)"
    " INSERT INTO turnout_response_items (namespace, item_id, response_id)"
    " SELECT $1, held.item_id, kept.id FROM kept, unnest($5::text[]) AS held(item_id)"
    " ON CONFLICT (namespace, item_id) DO UPDATE SET response_id = excluded.response_id"
)
#: The items given as $7 (ids) and $8 (JSON), numbered from 1 (``n``).
_GIVEN_ITEMS = "unnest($7::text[], $8::bytea[]) WITH ORDINALITY AS x(item_id, data, n)"
#: Keeps a new conversation and its first items: $1 namespace, $2 id, $3 JSON, $4 size,
#: $5 item count, $6 ttl_s, $7 $8 the items.
_CREATE = (
    "WITH made AS ("
    " INSERT INTO turnout_conversations (namespace, id, head, size, next_seq, expires_at)"
    f" VALUES ($1, $2, $3, $4, $5, {_EXPIRY.format('$6')}) RETURNING id)"
    " INSERT INTO turnout_conversation_items (namespace, conversation_id, seq, item_id, data)"
    f" SELECT $1, made.id, x.n - 1, x.item_id, x.data FROM made, {_GIVEN_ITEMS}"
)
#: Adds items to a live conversation if they fit, in one statement (concurrent ones wait for
#: the conversation's row, then see its new size); 1 when added: $1 namespace, $2 id,
#: $3 bytes added, $4 item count, $5 ttl_s, $6 max_bytes, $7 $8 the items.
_APPEND = (
    "WITH grown AS ("
    " UPDATE turnout_conversations SET size = size + $3, next_seq = next_seq + $4,"
    f" expires_at = {_EXPIRY.format('$5')}"
    " WHERE namespace = $1 AND id = $2 AND expires_at > now() AND size + $3 <= $6"
    " RETURNING next_seq - $4 AS first),"
    " added AS ("
    " INSERT INTO turnout_conversation_items (namespace, conversation_id, seq, item_id, data)"
    f" SELECT $1, $2, grown.first + x.n - 1, x.item_id, x.data FROM grown, {_GIVEN_ITEMS})"
    " SELECT count(*) FROM grown"
)
_LIVE_CONVERSATION = (
    "SELECT true FROM turnout_conversations WHERE namespace = $1 AND id = $2 AND expires_at > now()"
)


class PostgresResponseStore:
    """Responses in ``turnout_responses`` (and which response holds each item in
    ``turnout_response_items``), each forgotten ``ttl_s`` after it was stored; one larger
    than ``max_bytes`` is not kept."""

    def __init__(self, link: PostgresLink) -> None:
        self._link = link

    async def get(self, response_id: str) -> StoredResponse | None:
        """The kept response, or None."""
        data = await self._link.call(
            lambda connection: connection.fetchval(
                "SELECT data FROM turnout_responses"
                " WHERE namespace = $1 AND id = $2 AND expires_at > now()",
                self._link.namespace,
                response_id,
            )
        )
        return None if data is None else _decode_response(data)

    async def put(self, stored: StoredResponse) -> None:
        """Keep a response (one over ``max_bytes`` is not kept, logged)."""
        data = _encode(stored)
        if not fits(stored, data, self._link.max_bytes):
            return
        # Sorted: responses kept together lock their items in one order (no deadlock).
        held = sorted(set(item_ids(stored)))
        await self._link.call(
            lambda connection: connection.execute(
                _PUT, self._link.namespace, stored.id, data, self._link.ttl_s, held
            )
        )
        self._link.wrote()

    async def holding(self, item_id: str) -> StoredResponse | None:
        """The kept response that last kept the item, or None."""
        data = await self._link.call(
            lambda connection: connection.fetchval(
                "SELECT r.data FROM turnout_response_items i JOIN turnout_responses r"
                " ON r.namespace = i.namespace AND r.id = i.response_id"
                " WHERE i.namespace = $1 AND i.item_id = $2 AND r.expires_at > now()",
                self._link.namespace,
                item_id,
            )
        )
        return None if data is None else _decode_response(data)

    async def delete(self, response_id: str) -> bool:
        """Forget a response."""
        live = await self._link.call(
            lambda connection: connection.fetchval(
                "DELETE FROM turnout_responses WHERE namespace = $1 AND id = $2"
                " RETURNING expires_at > now()",
                self._link.namespace,
                response_id,
            )
        )
        return bool(live)


#: What :meth:`PostgresConversationStore.append` found (raised outside the store call, which
#: would make any exception a 503).
_MISSING, _TOO_LARGE, _ADDED = range(3)


class PostgresConversationStore:
    """Conversations in ``turnout_conversations`` (the conversation, its size and the next
    item's position) and ``turnout_conversation_items``, forgotten ``ttl_s`` after the
    conversation last changed; one may not grow past ``max_bytes``. Adding items locks the
    conversation's row: appends that race all land, in some order."""

    def __init__(self, link: PostgresLink) -> None:
        self._link = link

    async def create(self, head: ConversationHead, items: Sequence[Item]) -> None:
        """Keep a new conversation."""
        data = _encode(head)
        encoded = [_encode(item) for item in items]
        size = len(data) + sum(map(len, encoded))
        if size > self._link.max_bytes:
            raise ConversationTooLarge(head.id, self._link.max_bytes)
        await self._link.call(
            lambda connection: connection.execute(
                _CREATE,
                self._link.namespace,
                head.id,
                data,
                size,
                len(items),
                self._link.ttl_s,
                _ids(items),
                encoded,
            )
        )
        self._link.wrote()

    async def head(self, conversation_id: str) -> ConversationHead | None:
        """The conversation, or None."""
        data = await self._link.call(
            lambda connection: connection.fetchval(
                "SELECT head FROM turnout_conversations"
                " WHERE namespace = $1 AND id = $2 AND expires_at > now()",
                self._link.namespace,
                conversation_id,
            )
        )
        return None if data is None else _decode_head(data)

    async def items(self, conversation_id: str) -> list[Item] | None:
        """The conversation's items (one round trip)."""
        rows = await self._link.call(
            lambda connection: connection.fetch(
                "SELECT i.data FROM turnout_conversations c"
                " LEFT JOIN turnout_conversation_items i"
                " ON i.namespace = c.namespace AND i.conversation_id = c.id"
                " WHERE c.namespace = $1 AND c.id = $2 AND c.expires_at > now()"
                " ORDER BY i.seq",
                self._link.namespace,
                conversation_id,
            )
        )
        if not rows:
            return None
        return [_decode_item(row[0]) for row in rows if row[0] is not None]

    async def set_metadata(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> ConversationHead | None:
        """Replace the metadata."""
        namespace = self._link.namespace

        async def update(connection: Any) -> ConversationHead | None:
            data = await connection.fetchval(
                "SELECT head FROM turnout_conversations"
                " WHERE namespace = $1 AND id = $2 AND expires_at > now() FOR UPDATE",
                namespace,
                conversation_id,
            )
            if data is None:
                return None
            head = msgspec.structs.replace(_decode_head(data), metadata=metadata)
            updated = _encode(head)
            await connection.execute(
                "UPDATE turnout_conversations SET head = $3, size = size + $4,"
                f" expires_at = {_EXPIRY.format('$5')} WHERE namespace = $1 AND id = $2",
                namespace,
                conversation_id,
                updated,
                len(updated) - len(data),
                self._link.ttl_s,
            )
            return head

        head = await self._link.transaction(update)
        self._link.wrote()
        return head

    async def append(self, conversation_id: str, items: Sequence[Item]) -> bool:
        """Add items at the end."""
        encoded = [_encode(item) for item in items]
        added = sum(map(len, encoded))
        namespace, ttl_s, max_bytes = self._link.namespace, self._link.ttl_s, self._link.max_bytes

        async def add(connection: Any) -> int:
            added_now = await connection.fetchval(
                _APPEND, namespace, conversation_id, added, len(items), ttl_s, max_bytes,
                _ids(items), encoded,
            )  # fmt: skip
            if added_now:
                return _ADDED
            live = await connection.fetchval(_LIVE_CONVERSATION, namespace, conversation_id)
            return _TOO_LARGE if live else _MISSING

        outcome = await self._link.call(add)
        if outcome == _TOO_LARGE:
            raise ConversationTooLarge(conversation_id, max_bytes)
        self._link.wrote()
        return outcome == _ADDED

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        """Remove one item (the first with that id)."""
        removed = await self._link.call(
            lambda connection: connection.fetchval(
                "WITH gone AS ("
                " DELETE FROM turnout_conversation_items"
                " WHERE namespace = $1 AND conversation_id = $2 AND seq = ("
                "  SELECT i.seq FROM turnout_conversation_items i"
                "  JOIN turnout_conversations c"
                "  ON c.namespace = i.namespace AND c.id = i.conversation_id"
                "  WHERE i.namespace = $1 AND i.conversation_id = $2 AND i.item_id = $3"
                "  AND c.expires_at > now() ORDER BY i.seq LIMIT 1)"
                " RETURNING length(data) AS size)"
                " UPDATE turnout_conversations c SET size = c.size - gone.size,"
                f" expires_at = {_EXPIRY.format('$4')}"
                " FROM gone WHERE c.namespace = $1 AND c.id = $2 RETURNING true",
                self._link.namespace,
                conversation_id,
                item_id,
                self._link.ttl_s,
            )
        )
        return bool(removed)

    async def delete(self, conversation_id: str) -> bool:
        """Forget a conversation (its items go with it)."""
        live = await self._link.call(
            lambda connection: connection.fetchval(
                "DELETE FROM turnout_conversations WHERE namespace = $1 AND id = $2"
                " RETURNING expires_at > now()",
                self._link.namespace,
                conversation_id,
            )
        )
        return bool(live)


def _ids(items: Sequence[Item]) -> list[str | None]:
    """The items' ids (None for one without a string id)."""
    return [item_id if isinstance(item_id := item.get("id"), str) else None for item in items]
