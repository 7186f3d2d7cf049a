"""Where responses are kept: for ``GET /v1/responses/{id}``, its input items, and
``previous_response_id``.

A kept response holds the response object and every item it was generated from: the items of
the responses it follows (their input and output), then its own input. It is found by its id,
and by the id of any item it holds (an ``item_reference`` input item). A follow-up therefore
needs only the one response it names, however long the chain, and keeps working when earlier
responses of the chain are gone.

:class:`MemoryResponseStore` keeps them in the serving process, bounded in count and bytes
(least recently used first out) and forgotten after a time to live. :class:`RedisResponseStore`
(and :class:`~turnout.responses.postgres.PostgresResponseStore`) keep them in Redis (PostgreSQL),
shared by every serving process and replica, each under its time to live; every call has a
deadline, and a store that fails or misses it answers 503 (reads) or is logged (writes: the
answer stands, only a follow-up misses it). After a few failures in a row, calls fail at once
until a retry finds the store back (:class:`~turnout.responses.breaker.Breaker`).
:func:`~turnout.responses.storage.make_storage` makes the stores the config names.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from turnout.responses.redis_link import RedisLink
from turnout.responses.shared import StoreUnavailable
from turnout.tenants.context import current_tenant

__all__ = [
    "MemoryResponseStore",
    "RedisResponseStore",
    "ResponseStore",
    "StoreUnavailable",
    "StoredResponse",
]

log = logging.getLogger(__name__)


class StoredResponse(msgspec.Struct):
    """A kept response, the items it was generated from, and the tenant that made it (only
    that tenant's requests find it)."""

    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    tenant: str | None = None

    @property
    def id(self) -> str:
        """The response's id."""
        response_id: str = self.response["id"]
        return response_id

    def context(self) -> list[dict[str, Any]]:
        """What a follow-up (``previous_response_id``) continues: the input items, then the
        response's output."""
        return [*self.input_items, *self.response["output"]]


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(StoredResponse).decode


def current_owner() -> str | None:
    """The name of the current request's tenant: the owner of what it keeps, and the only one
    to find it (None: untenanted requests, which find only untenanted responses)."""
    tenant = current_tenant()
    return None if tenant is None else tenant.name


async def find_kept(store: ResponseStore, response_id: str) -> StoredResponse | None:
    """The kept response if the current request's tenant made it (another tenant's is as if
    it were never kept)."""
    stored = await store.get(response_id)
    if stored is None or stored.tenant != current_owner():
        return None
    return stored


async def find_item(store: ResponseStore, item_id: str) -> dict[str, Any] | None:
    """A kept item (an input or output item of a kept response) by its id, if the current
    request's tenant made it: what an ``item_reference`` input item stands for."""
    stored = await store.holding(item_id)
    if stored is None or stored.tenant != current_owner():
        return None
    return next((item for item in stored.context() if item.get("id") == item_id), None)


def fits(stored: StoredResponse, data: bytes, max_bytes: int) -> bool:
    """Whether a response's JSON is small enough to keep (one larger is not kept, logged)."""
    if len(data) <= max_bytes:
        return True
    log.warning(
        "response %s is not stored: %d bytes is more than responses.max_bytes (%d)",
        stored.id,
        len(data),
        max_bytes,
    )
    return False


def item_ids(stored: StoredResponse) -> list[str]:
    """The ids of the items a kept response holds (its context)."""
    return [item["id"] for item in stored.context() if isinstance(item.get("id"), str)]


class ResponseStore(Protocol):
    """Keeps responses by id."""

    async def get(self, response_id: str) -> StoredResponse | None:
        """The kept response, or None (never kept, deleted, or expired)."""
        ...

    async def put(self, stored: StoredResponse) -> None:
        """Keep a response (under its id), and find it by the ids of the items it holds."""
        ...

    async def holding(self, item_id: str) -> StoredResponse | None:
        """The most recently kept response that holds the item, or None."""
        ...

    async def delete(self, response_id: str) -> bool:
        """Forget a response; False when it was not kept."""
        ...


class MemoryResponseStore:
    """Responses kept in this process: at most ``max_entries`` and ``max_bytes`` of JSON (the
    least recently used are dropped first), each for ``ttl_s`` seconds."""

    def __init__(
        self,
        *,
        max_entries: int,
        max_bytes: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._ttl_s = ttl_s
        self._clock = clock
        #: id → (JSON, expiry), least recently used first.
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._bytes = 0
        #: item id → the response that last kept it; response id → the ids of its items.
        self._item_holders: dict[str, str] = {}
        self._held_items: dict[str, list[str]] = {}

    @property
    def size(self) -> tuple[int, int]:
        """Responses and bytes kept now."""
        return len(self._entries), self._bytes

    async def get(self, response_id: str) -> StoredResponse | None:
        """The kept response (now the most recently used), or None."""
        entry = self._entries.get(response_id)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            self._drop(response_id)
            return None
        self._entries.move_to_end(response_id)
        return _decode(entry[0])

    async def put(self, stored: StoredResponse) -> None:
        """Keep a response, dropping the least recently used ones over the bounds; one larger
        than ``max_bytes`` alone is not kept (logged)."""
        data = _encode(stored)
        if not fits(stored, data, self._max_bytes):
            return
        self._drop(stored.id)
        self._entries[stored.id] = (data, self._clock() + self._ttl_s)
        self._bytes += len(data)
        held = self._held_items[stored.id] = item_ids(stored)
        self._item_holders.update((item_id, stored.id) for item_id in held)
        now = self._clock()
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._entries)))
        # Expired entries among the least recently used go too (the others on access).
        for response_id, (_, expiry) in list(itertools.islice(self._entries.items(), 8)):
            if expiry <= now:
                self._drop(response_id)

    async def holding(self, item_id: str) -> StoredResponse | None:
        """The kept response that last kept the item, or None."""
        response_id = self._item_holders.get(item_id)
        return None if response_id is None else await self.get(response_id)

    async def delete(self, response_id: str) -> bool:
        """Forget a response."""
        entry = self._entries.get(response_id)
        expired = entry is not None and entry[1] <= self._clock()
        found = self._drop(response_id)
        return found and not expired

    def _drop(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self._bytes -= len(entry[0])
        for item_id in self._held_items.pop(response_id, ()):
            if self._item_holders.get(item_id) == response_id:
                del self._item_holders[item_id]
        return True


class RedisResponseStore:
    """Responses kept in Redis under ``<key_prefix>:response:<id>`` (and the id of the response
    holding each item under ``<key_prefix>:item:<id>``), each expiring ``ttl_s`` after it was
    stored; one larger than ``max_bytes`` is not kept. Every call has the deadline
    ``timeout_s``: a call that fails or misses it raises :class:`StoreUnavailable` (logged)."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._redis = link.redis
        self._prefix = f"{link.key_prefix}:response:"
        self._item_prefix = f"{link.key_prefix}:item:"

    async def get(self, response_id: str) -> StoredResponse | None:
        """The kept response, or None."""
        data = await self._call(self._redis.get(self._prefix + response_id))
        return None if data is None else _decode(data)

    async def put(self, stored: StoredResponse) -> None:
        """Keep a response (one over ``max_bytes`` is not kept, logged)."""
        data = _encode(stored)
        if not fits(stored, data, self._link.max_bytes):
            return
        pipeline = self._redis.pipeline(transaction=False)
        pipeline.set(self._prefix + stored.id, data, px=self._link.ttl_ms)
        for item_id in item_ids(stored):
            pipeline.set(self._item_prefix + item_id, stored.id, px=self._link.ttl_ms)
        await self._call(pipeline.execute())

    async def holding(self, item_id: str) -> StoredResponse | None:
        """The kept response that last kept the item, or None."""
        holder: bytes | None = await self._call(self._redis.get(self._item_prefix + item_id))
        return None if holder is None else await self.get(holder.decode())

    async def delete(self, response_id: str) -> bool:
        """Forget a response."""
        removed = await self._call(self._redis.delete(self._prefix + response_id))
        return bool(removed)

    async def _call(self, operation: Awaitable[Any]) -> Any:
        return await self._link.call(operation)
