"""The storage of the Responses API: one backend (``responses.storage``) for what a router
keeps, i.e. stored responses and conversations (and what else is kept later, each a store of
its own on the same backend and settings).

- ``memory://``: each serving process keeps its own (bounded in count and bytes);
- ``redis://`` / ``rediss://``: one Redis (:class:`~turnout.responses.redis_link.RedisLink`);
- ``postgres://`` / ``postgresql://``: one PostgreSQL database
  (:class:`~turnout.responses.postgres.PostgresLink`), its schema created and migrated by
  turnout.

The shared backends hold one connection pool, one breaker and every call under the deadline
``responses.timeout_s`` for all their stores; rows and keys carry their time to live
(``responses.ttl_s``) and one response or conversation may not grow past
``responses.max_bytes``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from turnout.config import ResponsesConfig
from turnout.responses.conversations import (
    ConversationStore,
    MemoryConversationStore,
    RedisConversationStore,
)
from turnout.responses.postgres import (
    PostgresConversationStore,
    PostgresLink,
    PostgresResponseStore,
)
from turnout.responses.redis_link import RedisLink
from turnout.responses.store import MemoryResponseStore, RedisResponseStore, ResponseStore


class Storage:
    """The stores of one backend, and their shared connections (closed by :meth:`aclose`)."""

    def __init__(
        self,
        responses: ResponseStore,
        conversations: ConversationStore,
        close: Callable[[], Awaitable[None]] | None = None,
        start: Callable[[], object] | None = None,
    ) -> None:
        self.responses = responses
        self.conversations = conversations
        self._close = close
        self._start = start

    def start(self) -> None:
        """Begin connecting (in the serving process, its loop running): a backend that
        prepares itself (PostgreSQL's schema) does it before the first request needs it.
        Returns at once; a backend that cannot be reached now is tried again on use."""
        if self._start is not None:
            self._start()

    async def aclose(self) -> None:
        """Release the backend's connections (the app's end)."""
        if self._close is not None:
            await self._close()


def scheme(storage: str) -> str:
    """The backend ``responses.storage`` names: ``memory``, ``redis`` or ``postgres``."""
    name = storage.split("://", 1)[0]
    return {"rediss": "redis", "postgresql": "postgres"}.get(name, name)


def make_storage(config: ResponsesConfig) -> Storage:
    """The stores of the backend ``config.storage`` names, with its settings."""
    backend = scheme(config.storage)
    if backend == "redis":
        redis = RedisLink(config)
        return Storage(RedisResponseStore(redis), RedisConversationStore(redis), redis.aclose)
    if backend == "postgres":
        postgres = PostgresLink(config)
        return Storage(
            PostgresResponseStore(postgres),
            PostgresConversationStore(postgres),
            postgres.aclose,
            postgres.open,
        )
    entries, size, ttl_s = config.max_entries, config.max_bytes, config.ttl_s
    return Storage(
        MemoryResponseStore(max_entries=entries, max_bytes=size, ttl_s=ttl_s),
        MemoryConversationStore(max_entries=entries, max_bytes=size, ttl_s=ttl_s),
    )
