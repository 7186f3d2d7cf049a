"""Where conversations are kept: ``/v1/conversations`` and ``conversation`` on
``POST /v1/responses``.

A conversation is an id, its metadata, the tenant that made it, and its items in order: the
items clients add, and the input and output items of each response made in it. Backends as
the response store's (:mod:`turnout.responses.storage`), with the same settings
(``responses.*``): :class:`MemoryConversationStore` keeps them in the serving process,
bounded in count and bytes (least recently used first out); :class:`RedisConversationStore`
(and :class:`~turnout.responses.postgres.PostgresConversationStore`) keep them in Redis
(PostgreSQL), shared by every serving process and replica. Each is forgotten ``ttl_s``
after it last changed. Adding items is one step of the store (no read-modify-write), so
responses finishing together in one conversation all land in it.
"""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import msgspec

from turnout.errors import ApiError
from turnout.responses.items import Item, new_id
from turnout.responses.redis_link import RedisLink
from turnout.responses.store import current_owner

log = logging.getLogger(__name__)


class ConversationHead(msgspec.Struct):
    """A conversation without its items: what ``GET /v1/conversations/{id}`` shows (and its
    tenant, the only one to find it)."""

    id: str
    created_at: int
    metadata: dict[str, str]
    tenant: str | None = None

    def resource(self) -> dict[str, Any]:
        """The ``conversation`` object."""
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        }


class ConversationTooLarge(ApiError):
    """400: adding the items would make the conversation larger than the store keeps."""

    def __init__(self, conversation_id: str, max_bytes: int) -> None:
        super().__init__(
            400,
            f"conversation {conversation_id!r} cannot grow past {max_bytes} bytes "
            "(responses.max_bytes): start a new conversation",
            param="items",
            code="conversation_too_large",
        )


_encode = msgspec.json.Encoder().encode
_decode_head = msgspec.json.Decoder(ConversationHead).decode
_decode_item = msgspec.json.Decoder(dict[str, Any]).decode
_decode_items = msgspec.json.Decoder(list[dict[str, Any]]).decode


class ConversationStore(Protocol):
    """Keeps conversations by id."""

    async def create(self, head: ConversationHead, items: Sequence[Item]) -> None:
        """Keep a new conversation with its first items (:class:`ConversationTooLarge`)."""
        ...

    async def head(self, conversation_id: str) -> ConversationHead | None:
        """The conversation (without items), or None (never kept, deleted or expired)."""
        ...

    async def items(self, conversation_id: str) -> list[Item] | None:
        """The conversation's items in order, or None when it is not kept."""
        ...

    async def set_metadata(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> ConversationHead | None:
        """Replace the metadata; the updated conversation, or None when it is not kept."""
        ...

    async def append(self, conversation_id: str, items: Sequence[Item]) -> bool:
        """Add items at the end; False when the conversation is not kept
        (:class:`ConversationTooLarge`)."""
        ...

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        """Remove one item; False when it (or the conversation) is not kept."""
        ...

    async def delete(self, conversation_id: str) -> bool:
        """Forget a conversation; False when it was not kept."""
        ...


#: The ids turnout gives conversations (:func:`~turnout.responses.items.new_id`); no other id
#: reaches a store (in Redis, ``<id>:items`` would name another conversation's items).
_CONVERSATION_ID = re.compile(r"conv_[0-9a-f]{48}")


def new_conversation_id() -> str:
    """A fresh conversation id."""
    return new_id("conv")


async def find_conversation(
    store: ConversationStore, conversation_id: str
) -> ConversationHead | None:
    """The conversation if the current request's tenant made it (another tenant's, or an id
    turnout never gives, is as if it were never kept)."""
    if _CONVERSATION_ID.fullmatch(conversation_id) is None:
        return None
    head = await store.head(conversation_id)
    if head is None or head.tenant != current_owner():
        return None
    return head


class _Kept:
    """One conversation in memory, and its size in bytes (of JSON)."""

    __slots__ = ("expiry", "head", "items", "size")

    def __init__(self, head: ConversationHead, expiry: float) -> None:
        self.head = head
        self.items: list[tuple[Item, int]] = []
        self.size = len(_encode(head))
        self.expiry = expiry


class MemoryConversationStore:
    """Conversations kept in this process: at most ``max_entries`` and ``max_bytes`` of JSON
    in all (the least recently used are dropped first; one conversation may not grow past
    ``max_bytes``), each forgotten ``ttl_s`` seconds after it last changed."""

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
        self._entries: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0

    @property
    def size(self) -> tuple[int, int]:
        """Conversations and bytes kept now."""
        return len(self._entries), self._bytes

    async def create(self, head: ConversationHead, items: Sequence[Item]) -> None:
        """Keep a new conversation."""
        kept = _Kept(head, self._clock() + self._ttl_s)
        self._add(kept, items)
        self._entries[head.id] = kept
        self._bytes += kept.size
        self._shrink(keep=head.id)

    async def head(self, conversation_id: str) -> ConversationHead | None:
        """The conversation (now the most recently used), or None."""
        kept = self._find(conversation_id)
        return None if kept is None else kept.head

    async def items(self, conversation_id: str) -> list[Item] | None:
        """The conversation's items."""
        kept = self._find(conversation_id)
        return None if kept is None else [item for item, _ in kept.items]

    async def set_metadata(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> ConversationHead | None:
        """Replace the metadata."""
        kept = self._find(conversation_id)
        if kept is None:
            return None
        old = len(_encode(kept.head))
        kept.head = msgspec.structs.replace(kept.head, metadata=metadata)
        self._resized(kept, len(_encode(kept.head)) - old)
        return kept.head

    async def append(self, conversation_id: str, items: Sequence[Item]) -> bool:
        """Add items at the end."""
        kept = self._find(conversation_id)
        if kept is None:
            return False
        before = kept.size
        self._add(kept, items)
        self._resized(kept, kept.size - before, counted=False)
        return True

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        """Remove one item."""
        kept = self._find(conversation_id)
        if kept is None:
            return False
        for i, (item, size) in enumerate(kept.items):
            if item.get("id") == item_id:
                del kept.items[i]
                self._resized(kept, -size)
                return True
        return False

    async def delete(self, conversation_id: str) -> bool:
        """Forget a conversation."""
        return self._find(conversation_id) is not None and self._drop(conversation_id)

    def _add(self, kept: _Kept, items: Sequence[Item]) -> None:
        # Kept as copies of their JSON: nothing the caller changes later reaches them.
        encoded = [_encode(item) for item in items]
        sized = [(_decode_item(data), len(data)) for data in encoded]
        grown = kept.size + sum(size for _, size in sized)
        if grown > self._max_bytes:
            raise ConversationTooLarge(kept.head.id, self._max_bytes)
        kept.items.extend(sized)
        kept.size = grown

    def _resized(self, kept: _Kept, delta: int, *, counted: bool = True) -> None:
        """Account a change of ``kept``'s size (already in ``kept.size`` unless ``counted``)."""
        if counted:
            kept.size += delta
        self._bytes += delta
        kept.expiry = self._clock() + self._ttl_s
        self._shrink(keep=kept.head.id)

    def _find(self, conversation_id: str) -> _Kept | None:
        kept = self._entries.get(conversation_id)
        if kept is None:
            return None
        if kept.expiry <= self._clock():
            self._drop(conversation_id)
            return None
        self._entries.move_to_end(conversation_id)
        return kept

    def _shrink(self, *, keep: str) -> None:
        """Drop the least recently used over the bounds (never ``keep``, the one in use), and
        expired ones among the oldest."""
        while len(self._entries) > self._max_entries or self._bytes > self._max_bytes:
            oldest = next(iter(self._entries))
            if oldest == keep:
                break
            self._drop(oldest)
        now = self._clock()
        for conversation_id, kept in list(itertools.islice(self._entries.items(), 8)):
            if kept.expiry <= now and conversation_id != keep:
                self._drop(conversation_id)

    def _drop(self, conversation_id: str) -> bool:
        kept = self._entries.pop(conversation_id, None)
        if kept is None:
            return False
        self._bytes -= kept.size
        return True


#: Adds items if the conversation is kept and stays within its bound, and renews both keys'
#: time to live: KEYS = head, items, size; ARGV = ttl ms, max bytes, bytes added, items….
_APPEND = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local size = tonumber(redis.call('GET', KEYS[3]) or '0')
local added = tonumber(ARGV[3])
if size + added > tonumber(ARGV[2]) then return -2 end
for i = 4, #ARGV do redis.call('RPUSH', KEYS[2], ARGV[i]) end
redis.call('SET', KEYS[3], size + added, 'PX', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[1])
return 1
"""
#: The items as one JSON array (one reply, not one per item): KEYS = head, items.
_ITEMS = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
return '[' .. table.concat(redis.call('LRANGE', KEYS[2], 0, -1), ',') .. ']'
"""
#: Removes the first item whose id is ARGV[1], and its bytes: KEYS = items, size.
_DELETE_ITEM = """
for _, data in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local ok, item = pcall(cjson.decode, data)
  if ok and type(item) == 'table' and item['id'] == ARGV[1] then
    redis.call('LREM', KEYS[1], 1, data)
    redis.call('DECRBY', KEYS[2], #data)
    return 1
  end
end
return 0
"""


class RedisConversationStore:
    """Conversations kept in Redis: the conversation under ``<key_prefix>:conversation:<id>``,
    its items (a list of JSON) under ``…:items`` and their size under ``…:bytes``, all
    expiring ``ttl_s`` after the conversation last changed; one may not grow past
    ``max_bytes``. Every call has the deadline ``timeout_s``: a call that fails or misses it
    raises :class:`~turnout.responses.store.StoreUnavailable` (logged)."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._redis = link.redis
        self._append_script = self._redis.register_script(_APPEND)
        self._items_script = self._redis.register_script(_ITEMS)
        self._delete_item_script = self._redis.register_script(_DELETE_ITEM)
        self._prefix = f"{link.key_prefix}:conversation:"
        self._ttl_ms = link.ttl_ms
        self._max_bytes = link.max_bytes

    def _keys(self, conversation_id: str) -> list[str]:
        key = self._prefix + conversation_id
        return [key, key + ":items", key + ":bytes"]

    async def create(self, head: ConversationHead, items: Sequence[Item]) -> None:
        """Keep a new conversation."""
        key, _, size_key = self._keys(head.id)
        data = _encode(head)
        if len(data) + sum(len(_encode(item)) for item in items) > self._max_bytes:
            raise ConversationTooLarge(head.id, self._max_bytes)
        pipeline = self._redis.pipeline(transaction=True)
        pipeline.set(key, data, px=self._ttl_ms)
        pipeline.set(size_key, len(data), px=self._ttl_ms)
        await self._call(pipeline.execute())
        if items:
            await self.append(head.id, items)

    async def head(self, conversation_id: str) -> ConversationHead | None:
        """The conversation, or None."""
        data = await self._call(self._redis.get(self._keys(conversation_id)[0]))
        return None if data is None else _decode_head(data)

    async def items(self, conversation_id: str) -> list[Item] | None:
        """The conversation's items."""
        data = await self._call(self._items_script(keys=self._keys(conversation_id)[:2]))
        return None if data is None else _decode_items(data)

    async def set_metadata(
        self, conversation_id: str, metadata: dict[str, str]
    ) -> ConversationHead | None:
        """Replace the metadata (the conversation's size is not recounted: metadata is
        bounded)."""
        head = await self.head(conversation_id)
        if head is None:
            return None
        head = msgspec.structs.replace(head, metadata=metadata)
        keys = self._keys(conversation_id)
        pipeline = self._redis.pipeline(transaction=True)
        pipeline.set(keys[0], _encode(head), px=self._ttl_ms, xx=True)
        for key in keys[1:]:
            pipeline.pexpire(key, self._ttl_ms)
        updated, *_ = await self._call(pipeline.execute())
        return head if updated else None

    async def append(self, conversation_id: str, items: Sequence[Item]) -> bool:
        """Add items at the end."""
        encoded = [_encode(item) for item in items]
        added = sum(map(len, encoded))
        args: list[bytes | int] = [self._ttl_ms, self._max_bytes, added, *encoded]
        outcome = await self._call(self._append_script(keys=self._keys(conversation_id), args=args))
        if outcome == -2:
            raise ConversationTooLarge(conversation_id, self._max_bytes)
        return bool(outcome == 1)

    async def delete_item(self, conversation_id: str, item_id: str) -> bool:
        """Remove one item."""
        keys = self._keys(conversation_id)[1:]
        removed = await self._call(self._delete_item_script(keys=keys, args=[item_id]))
        return bool(removed)

    async def delete(self, conversation_id: str) -> bool:
        """Forget a conversation."""
        keys = self._keys(conversation_id)
        pipeline = self._redis.pipeline(transaction=True)
        pipeline.delete(keys[0])
        pipeline.delete(*keys[1:])
        removed, _ = await self._call(pipeline.execute())
        return bool(removed)

    async def _call(self, operation: Awaitable[Any]) -> Any:
        return await self._link.call(operation)
