"""The streams' keep-alive comments on one loop timer: an idle stream gets its comments, a busy
one none, a stopped one leaves the board (and its timer goes with the last one)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

from turnout.server.keepalive import KeepAlive, board_of
from turnout.server.sse import KEEPALIVE


class Recorder:
    def __init__(self) -> None:
        self.times: list[float] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        assert message["body"] == KEEPALIVE
        self.times.append(asyncio.get_running_loop().time())


async def test_idle_streams_get_comments_and_busy_ones_none() -> None:
    loop = asyncio.get_running_loop()
    idle, busy, late = Recorder(), Recorder(), Recorder()
    started = loop.time()
    idle_alive = KeepAlive(idle, 0.05)  # type: ignore[arg-type]
    busy_alive = KeepAlive(busy, 0.05)  # type: ignore[arg-type]
    await asyncio.sleep(0.02)
    late_alive = KeepAlive(late, 0.05)  # type: ignore[arg-type]  # a silence out of phase
    board = board_of(loop)
    try:
        while loop.time() - started < 0.4:
            assert busy_alive.before_send() is None
            busy_alive.sent()
            await asyncio.sleep(0.005)
    finally:
        for alive in (idle_alive, busy_alive, late_alive):
            await alive.stop()
    assert busy.times == []
    for recorder in (idle, late):
        assert 4 <= len(recorder.times) <= 9, recorder.times
        gaps = [b - a for a, b in zip(recorder.times, recorder.times[1:], strict=False)]
        # Never before 15/16 of the interval; late only by the loop's own delays.
        assert all(gap >= 0.05 * 15 / 16 - 0.002 for gap in gaps), gaps
    assert idle.times[0] - started >= 0.05 * 15 / 16 - 0.002
    assert not board._streams
    assert board._timer is None


async def test_a_piece_waits_for_a_comment_being_sent() -> None:
    gate = asyncio.Event()
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        await gate.wait()
        sent.append(message["body"])

    alive = KeepAlive(send, 0.01)  # type: ignore[arg-type]
    try:
        await asyncio.sleep(0.05)
        pending = alive.before_send()
        assert pending is not None  # the comment's send is stuck
        gate.set()
        await pending
        assert sent == [KEEPALIVE]
        alive.sent()
    finally:
        await alive.stop()


def test_a_board_does_not_keep_its_loop_alive() -> None:
    async def stream() -> None:
        alive = KeepAlive(Recorder(), 0.01)  # type: ignore[arg-type]
        await asyncio.sleep(0.03)
        await alive.stop()

    loop = asyncio.new_event_loop()
    loop.run_until_complete(stream())
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None
