"""Stopping a helper task without losing the caller's own cancellation."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` and wait until it has finished; what it raised is dropped.

    A cancellation of the caller while it waits propagates (``CancelledError``), unlike
    ``with suppress(BaseException): await task``, which cannot tell the task's cancellation
    from the caller's and swallows both. The task, already cancelled, then ends on its own.
    """
    if task.done():
        _retrieve(task)
        return
    task.add_done_callback(_retrieve)
    task.cancel()
    await asyncio.wait({task})


def _retrieve(task: asyncio.Future[Any]) -> None:
    # Read the outcome so asyncio does not log "exception was never retrieved".
    if not task.cancelled():
        task.exception()
