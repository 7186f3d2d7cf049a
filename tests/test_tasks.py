"""Stopping helper tasks: the helper's end is awaited, the caller's own cancellation is kept."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from turnout.server.keepalive import KeepAlive
from turnout.server.limits import ClientWatch
from turnout.tasks import cancel_and_wait


class SlowToStop:
    """A coroutine that, once cancelled, takes until ``release`` to finish (a cleanup that
    awaits something), so whoever stops it has to wait."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cleaning = asyncio.Event()
        self.release = asyncio.Event()
        self.finished = False

    async def run(self, *_: Any) -> Any:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cleaning.set()
            await self.release.wait()
            self.finished = True
            raise
        return None


async def stop_while_cancelled(stop: Callable[[], Awaitable[None]], helper: SlowToStop) -> None:
    """Run ``stop()`` in a task, cancel that task while it waits for the helper, and check the
    cancellation reaches it (and that the helper still gets to finish)."""
    stopper = asyncio.create_task(stop())
    await asyncio.wait_for(helper.cleaning.wait(), 5)
    await asyncio.sleep(0)  # the stopper is waiting for the helper now
    stopper.cancel()
    helper.release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(stopper, 5)
    await asyncio.sleep(0.01)
    assert helper.finished


async def test_cancel_and_wait_waits_for_the_task_and_drops_its_error() -> None:
    async def failing_cleanup() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)
            raise ValueError("cleanup broke") from None

    task = asyncio.create_task(failing_cleanup())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.done()
    assert isinstance(task.exception(), ValueError)
    await cancel_and_wait(task)  # already done: nothing to do


async def test_cancel_and_wait_lets_the_callers_cancellation_through() -> None:
    helper = SlowToStop()
    task = asyncio.create_task(helper.run())
    await asyncio.sleep(0)
    await stop_while_cancelled(lambda: cancel_and_wait(task), helper)


async def test_client_watch_close_keeps_the_callers_cancellation() -> None:
    helper = SlowToStop()
    messages = iter([{"type": "http.request", "body": b"{}", "more_body": False}])

    async def receive() -> dict[str, Any]:
        message = next(messages, None)
        if message is not None:
            return message
        await helper.run()
        return {"type": "http.disconnect"}

    watch = ClientWatch(receive, 1024)
    await watch.start()
    await stop_while_cancelled(watch.close, helper)


async def test_keepalive_stop_keeps_the_callers_cancellation() -> None:
    helper = SlowToStop()
    keepalive = KeepAlive(helper.run, 0.01)  # its comment's send hangs
    await asyncio.wait_for(helper.started.wait(), 5)
    await stop_while_cancelled(keepalive.stop, helper)
