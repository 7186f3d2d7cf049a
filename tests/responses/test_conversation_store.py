"""The conversation stores, in memory, in a real Redis and a real PostgreSQL: what they keep,
the bound on one conversation's size, appends that race all landing; in memory, the bounds in
count and bytes (least recently used out first) and the time to live."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from turnout.responses.conversations import (
    ConversationHead,
    ConversationStore,
    ConversationTooLarge,
    MemoryConversationStore,
)

from .conftest import open_storage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def head(conversation_id: str, tenant: str | None = None) -> ConversationHead:
    return ConversationHead(conversation_id, 1_700_000_000, {"k": "v"}, tenant)


def item(item_id: str, text: str = "x") -> dict[str, object]:
    return {"id": item_id, "type": "message", "role": "user", "content": text}


@pytest.fixture
async def store(storage_url: str) -> AsyncIterator[ConversationStore]:
    """Each backend's conversation store."""
    async with open_storage(storage_url, max_bytes=2_000, timeout_s=5) as storage:
        yield storage.conversations


async def test_a_conversation_is_kept_changed_and_forgotten(store: ConversationStore) -> None:
    await store.create(head("conv_1", "a"), [item("i1", "é\u2028")])
    assert await store.head("conv_1") == head("conv_1", "a")
    assert await store.append("conv_1", [item("i2"), item("i3")])
    assert await store.items("conv_1") == [item("i1", "é\u2028"), item("i2"), item("i3")]
    assert await store.delete_item("conv_1", "i2")
    assert not await store.delete_item("conv_1", "i2")
    assert [i["id"] for i in await store.items("conv_1") or []] == ["i1", "i3"]
    updated = await store.set_metadata("conv_1", {"new": "yes"})
    assert updated == msgspec.structs.replace(head("conv_1", "a"), metadata={"new": "yes"})
    assert await store.head("conv_1") == updated
    assert await store.delete("conv_1")
    assert not await store.delete("conv_1")
    assert await store.head("conv_1") is None
    assert await store.items("conv_1") is None
    assert not await store.append("conv_1", [item("i4")])
    assert await store.set_metadata("conv_1", {}) is None
    assert await store.head("conv_1") is None


async def test_a_conversation_cannot_grow_past_max_bytes(store: ConversationStore) -> None:
    with pytest.raises(ConversationTooLarge):
        await store.create(head("conv_big"), [item("i", "x" * 3_000)])
    assert await store.head("conv_big") is None
    await store.create(head("conv_2"), [item("i1", "x" * 900)])
    with pytest.raises(ConversationTooLarge):
        await store.append("conv_2", [item("i2", "x" * 500), item("i3", "x" * 500)])
    assert [i["id"] for i in await store.items("conv_2") or []] == ["i1"]
    # Removing an item makes room again.
    assert await store.delete_item("conv_2", "i1")
    assert await store.append("conv_2", [item("i2", "x" * 900)])


async def test_appends_that_race_all_land(store: ConversationStore) -> None:
    await store.create(head("conv_3"), [])
    results = await asyncio.gather(*(store.append("conv_3", [item(f"i{n}")]) for n in range(20)))
    assert all(results)
    kept = await store.items("conv_3") or []
    assert sorted(i["id"] for i in kept) == sorted(f"i{n}" for n in range(20))


async def test_memory_keeps_the_most_recently_used_within_its_count() -> None:
    store = MemoryConversationStore(max_entries=2, max_bytes=10_000, ttl_s=60)
    await store.create(head("a"), [])
    await store.create(head("b"), [])
    await store.head("a")  # now b is the least recently used
    await store.create(head("c"), [])
    assert await store.head("b") is None
    assert await store.head("a") is not None
    assert await store.head("c") is not None


async def test_memory_drops_the_least_recently_used_over_its_bytes() -> None:
    store = MemoryConversationStore(max_entries=100, max_bytes=1_000, ttl_s=60)
    await store.create(head("a"), [item("a1", "x" * 300)])
    await store.create(head("b"), [item("b1", "x" * 300)])
    # Growing b past what both may hold drops a, not b.
    assert await store.append("b", [item("b2", "x" * 300)])
    assert await store.head("a") is None
    assert len(await store.items("b") or []) == 2
    assert await store.delete("b")
    assert store.size == (0, 0)


async def test_memory_forgets_a_conversation_its_ttl_after_it_last_changed() -> None:
    clock = Clock()
    store = MemoryConversationStore(max_entries=10, max_bytes=10_000, ttl_s=60, clock=clock)
    await store.create(head("a"), [])
    clock.now += 50
    assert await store.append("a", [item("a1")])
    clock.now += 50  # 100 s after it was made, 50 after it last changed
    assert await store.head("a") is not None
    clock.now += 11
    assert await store.head("a") is None
    assert not await store.delete("a")
    assert store.size == (0, 0)
