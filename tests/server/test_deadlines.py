"""Per-request deadlines on one loop timer: they time out like ``asyncio.timeout_at``."""

from __future__ import annotations

import asyncio

import pytest

from turnout.deadlines import Deadlines


async def test_a_block_past_its_deadline_raises_timeout_error() -> None:
    board = Deadlines()
    with pytest.raises(TimeoutError), board.after(0.05) as deadline:
        await asyncio.sleep(30)
    assert deadline.expired()
    assert not board._pending
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_block_done_in_time_is_not_cancelled_later() -> None:
    board = Deadlines()
    with board.after(0.05) as deadline:
        await asyncio.sleep(0)
    assert not board._pending
    await asyncio.sleep(0.15)  # the timer runs and finds nothing due
    assert not deadline.expired()
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_no_deadline_never_times_out() -> None:
    board = Deadlines()
    with board.after(None) as deadline:
        await asyncio.sleep(0.05)
    assert not deadline.expired()
    assert board._timer is None


async def test_each_block_of_many_times_out_at_its_own_deadline() -> None:
    board = Deadlines()
    loop = asyncio.get_running_loop()
    ended: dict[float, float] = {}

    async def wait(delay: float) -> None:
        started = loop.time()
        try:
            with board.after(delay):
                await asyncio.sleep(30)
        except TimeoutError:
            ended[delay] = loop.time() - started

    # A later deadline first, then earlier ones: the timer moves earlier for them, and after
    # each expiry on to the earliest of the rest (not to the latest: 1.5 s is far from them).
    await asyncio.gather(wait(1.5), wait(0.3), wait(0.1), wait(0.2))
    assert sorted(ended) == [0.1, 0.2, 0.3, 1.5]
    for delay, took in ended.items():
        assert delay - 0.01 <= took < delay + 0.5, (delay, took)
    assert not board._pending


async def test_a_cancellation_from_elsewhere_goes_on_past_the_deadline() -> None:
    board = Deadlines()
    entered = asyncio.Event()
    blocks = []

    async def guarded() -> None:
        with board.after(0.05) as deadline:
            blocks.append(deadline)
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.ensure_future(guarded())
    await entered.wait()
    # The deadline and somebody else cancel the task in the same turn of the loop.
    asyncio.get_running_loop().call_at(blocks[0].when, task.cancel)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert blocks[0].expired()


async def test_a_cancellation_from_elsewhere_before_the_deadline_is_not_a_timeout() -> None:
    board = Deadlines()
    entered = asyncio.Event()

    async def guarded() -> None:
        with board.after(30):
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.ensure_future(guarded())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not board._pending


class _Item:
    """Something with a deadline on the board that records when it expired."""

    def __init__(self, when: float, log: list[str], name: str) -> None:
        self.when = when
        self.log = log
        self.name = name
        self.then: list[_Item] = []

    def expire(self) -> None:
        self.log.append(self.name)
        for other in self.then:
            other.board.forget(other)

    board: Deadlines


async def test_watched_items_expire_once_unless_forgotten() -> None:
    board = Deadlines()
    loop = asyncio.get_running_loop()
    log: list[str] = []
    now = loop.time()
    first, second, kept, gone = (
        _Item(now + 0.05, log, "first"),
        _Item(now + 0.05, log, "second"),
        _Item(now + 0.1, log, "kept"),
        _Item(now + 0.05, log, "gone"),
    )
    for item in (first, second, kept, gone):
        item.board = board
        board.watch(item, loop)
    board.forget(gone)
    # Whichever of the two due together expires first takes the other off: it must not fire.
    first.then, second.then = [second], [first]
    await asyncio.sleep(0.3)
    assert log in (["first", "kept"], ["second", "kept"])
    assert not board._pending
