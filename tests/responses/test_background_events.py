"""The event log of a background response: kept in order within its bound in bytes, read again
from any sequence number kept, followed live until it ends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from turnout.errors import ApiError
from turnout.responses.event_log import EventLog


def events(first: int, count: int, text: str = "x") -> list[dict[str, Any]]:
    return [
        {"type": "response.output_text.delta", "sequence_number": n, "delta": text}
        for n in range(first, first + count)
    ]


def test_events_are_read_again_after_any_sequence_number() -> None:
    log = EventLog(max_bytes=1 << 20)
    log.append(events(0, 5))
    assert [e["sequence_number"] for e in log.after(-1)] == [0, 1, 2, 3, 4]
    assert [e["sequence_number"] for e in log.after(2)] == [3, 4]
    assert log.after(4) == []
    assert log.after(99) == []
    assert log.next_sequence == 5


def test_the_oldest_events_go_past_the_bound_and_reading_them_is_a_400() -> None:
    one = len(b'{"type":"response.output_text.delta","sequence_number":0,"delta":"x"}')
    log = EventLog(max_bytes=3 * one + 2)
    log.append(events(0, 10))
    assert log.bytes <= 3 * one + 2
    kept = [e["sequence_number"] for e in log.after(6)]
    assert kept == [7, 8, 9]
    with pytest.raises(ApiError) as dropped:
        log.after(2)
    assert dropped.value.status == 400
    assert dropped.value.param == "starting_after"


async def test_a_follower_reads_the_live_events_until_the_end() -> None:
    log = EventLog(max_bytes=1 << 20)
    log.append(events(0, 2))
    read: list[int] = []

    async def follow() -> None:
        async for batch in log.follow(0):
            read.extend(e["sequence_number"] for e in batch)

    follower = asyncio.ensure_future(follow())
    await asyncio.sleep(0.01)
    log.append(events(2, 3))
    await asyncio.sleep(0.01)
    log.end()
    await asyncio.wait_for(follower, 5)
    assert read == [1, 2, 3, 4]
