"""The in-memory response store: bounded in count and bytes (least recently used out first),
forgotten after its time to live."""

from __future__ import annotations

from typing import Any

import msgspec

from turnout.config import build_config, config_warnings
from turnout.responses.store import MemoryResponseStore, StoredResponse


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def stored(response_id: str, text: str = "x") -> StoredResponse:
    output = [{"type": "message", "id": f"msg_{response_id}", "content": text}]
    return StoredResponse({"id": response_id, "output": output}, [{"id": "in", "text": text}])


async def test_get_returns_what_put_kept_and_delete_forgets_it() -> None:
    store = MemoryResponseStore(max_entries=10, max_bytes=10_000, ttl_s=60)
    await store.put(stored("a"))
    got = await store.get("a")
    assert got == stored("a")
    assert got is not None
    assert got.context() == [*got.input_items, *got.response["output"]]
    assert await store.delete("a")
    assert await store.get("a") is None
    assert not await store.delete("a")
    assert store.size == (0, 0)


async def test_keeping_a_response_again_replaces_it() -> None:
    """The same id kept twice (a response kept again when it completes) counts once."""
    store = MemoryResponseStore(max_entries=10, max_bytes=10_000, ttl_s=60)
    await store.put(stored("a", "first"))
    await store.put(stored("a", "second, longer"))
    assert await store.get("a") == stored("a", "second, longer")
    assert store.size == (1, len(msgspec.json.encode(stored("a", "second, longer"))))
    assert await store.delete("a")
    assert store.size == (0, 0)


async def test_the_least_recently_used_response_goes_first_over_the_count() -> None:
    store = MemoryResponseStore(max_entries=2, max_bytes=10_000, ttl_s=60)
    await store.put(stored("a"))
    await store.put(stored("b"))
    await store.get("a")  # now b is the least recently used
    await store.put(stored("c"))
    assert await store.get("b") is None
    assert await store.get("a") is not None
    assert await store.get("c") is not None


async def test_bytes_are_bounded_and_a_response_over_the_bound_is_not_kept() -> None:
    one = len(__import__("msgspec").json.encode(stored("a", "y" * 100)))
    store = MemoryResponseStore(max_entries=100, max_bytes=2 * one + 10, ttl_s=60)
    for name in "abc":
        await store.put(stored(name, "y" * 100))
    assert store.size == (2, 2 * one)
    assert await store.get("a") is None
    await store.put(stored("big", "y" * 1000))
    assert await store.get("big") is None
    assert store.size == (2, 2 * one)


async def test_a_response_is_forgotten_after_its_time_to_live() -> None:
    clock = Clock()
    store = MemoryResponseStore(max_entries=10, max_bytes=10_000, ttl_s=60, clock=clock)
    await store.put(stored("a"))
    await store.put(stored("b"))
    clock.now += 59
    assert await store.get("a") is not None
    clock.now += 2
    assert await store.get("a") is None
    assert not await store.delete("b")
    assert store.size == (0, 0)


def test_several_processes_with_a_memory_store_are_warned_about() -> None:
    def warnings(**sections: Any) -> list[str]:
        return [w for w in config_warnings(build_config(sections)) if "responses.storage" in w]

    assert warnings(server={"processes": 2})
    assert not warnings(server={"processes": 1})
    assert not warnings(server={"processes": 2}, responses={"storage": "redis://r:6379/0"})


async def test_an_item_finds_the_response_that_holds_it_until_that_is_dropped() -> None:
    store = MemoryResponseStore(max_entries=1, max_bytes=10**6, ttl_s=60)
    first = StoredResponse(
        {"id": "resp_1", "output": [{"id": "msg_out", "type": "message"}]},
        [{"id": "msg_in", "type": "message"}],
    )
    await store.put(first)
    assert await store.holding("msg_in") == first
    assert await store.holding("msg_out") == first
    await store.put(StoredResponse({"id": "resp_2", "output": []}, []))
    assert await store.holding("msg_in") is None


async def test_a_write_sweeps_out_expired_responses_nobody_reads() -> None:
    clock = Clock()
    store = MemoryResponseStore(max_entries=100, max_bytes=100_000, ttl_s=10, clock=clock)
    for name in "abc":
        await store.put(stored(name))
    clock.now += 5
    await store.put(stored("d"))
    assert store.size[0] == 4  # none expired yet
    clock.now += 6  # a, b and c expired; d has 4 s left
    await store.put(stored("e"))
    one = len(__import__("msgspec").json.encode(stored("a")))
    assert store.size == (2, 2 * one)  # gone without being read
