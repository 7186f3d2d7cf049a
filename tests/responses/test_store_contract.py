"""The response store of every backend (in memory, a real Redis, a real PostgreSQL) keeps the
same promises: a response found by its id and by the ids of the items it holds (the most
recently kept holder), its bytes and tenant read back as kept, deletion, the size bound, and
expiry after its time to live."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from turnout.responses.storage import Storage
from turnout.responses.store import StoredResponse

from .conftest import open_storage
from .test_conversation_store import head, item


def stored(response_id: str, *item_ids: str, tenant: str | None = None) -> StoredResponse:
    items = [{"id": item_id, "type": "message", "content": "é\u2028\x00"} for item_id in item_ids]
    output = [{"id": f"out_{response_id}", "type": "message", "content": "ok"}]
    return StoredResponse({"id": response_id, "output": output}, items, tenant)


@pytest.fixture
async def storage(storage_url: str) -> AsyncIterator[Storage]:
    async with open_storage(storage_url, max_bytes=20_000, ttl_s=60, timeout_s=5) as opened:
        yield opened


async def test_a_response_is_kept_found_by_its_items_and_forgotten(storage: Storage) -> None:
    store = storage.responses
    first = stored("resp_1", "in_1", "in_2", tenant="a")
    await store.put(first)
    assert await store.get("resp_1") == first
    assert await store.holding("in_2") == first
    assert await store.holding("out_resp_1") == first
    # A follow-up holds the items too: it is now their holder.
    second = stored("resp_2", "in_1", "in_3")
    await store.put(second)
    assert await store.holding("in_1") == second
    assert await store.holding("in_2") == first
    assert await store.get("missing") is None
    assert await store.holding("missing") is None
    assert await store.delete("resp_2")
    assert not await store.delete("resp_2")
    assert await store.get("resp_2") is None
    assert await store.holding("in_3") is None
    assert await store.get("resp_1") == first


async def test_keeping_a_response_again_replaces_it(storage: Storage) -> None:
    await storage.responses.put(stored("resp_1", "in_1"))
    again = stored("resp_1", "in_1", "in_1", "in_2")  # an item twice is fine
    await storage.responses.put(again)
    assert await storage.responses.get("resp_1") == again


async def test_a_response_over_max_bytes_is_not_kept(storage: Storage) -> None:
    large = stored("resp_big", *(f"in_{n}" for n in range(400)))
    await storage.responses.put(large)
    assert await storage.responses.get("resp_big") is None


async def test_responses_kept_at_once_all_land(storage: Storage) -> None:
    # Overlapping items, in different orders: no deadlock, every response kept.
    kept = [
        stored(f"resp_{n}", *(["in_a", "in_b"] if n % 2 else ["in_b", "in_a"])) for n in range(12)
    ]
    await asyncio.gather(*(storage.responses.put(one) for one in kept))
    for one in kept:
        assert await storage.responses.get(one.id) == one
    assert await storage.responses.holding("in_a") in kept


async def test_responses_and_conversations_expire_after_their_ttl(storage_url: str) -> None:
    async with open_storage(storage_url, ttl_s=0.3, timeout_s=5) as storage:
        await storage.responses.put(stored("resp_1", "in_1"))
        await storage.conversations.create(head("conv_1"), [item("i1")])
        assert await storage.responses.get("resp_1") is not None
        await asyncio.sleep(0.6)
        assert await storage.responses.get("resp_1") is None
        assert await storage.responses.holding("in_1") is None
        assert await storage.conversations.head("conv_1") is None
        assert await storage.conversations.items("conv_1") is None
        assert not await storage.conversations.append("conv_1", [item("i2")])
        assert not await storage.responses.delete("resp_1")
