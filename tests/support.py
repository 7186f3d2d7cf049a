"""Small helpers shared by tests across folders: waiting with a deadline, auth headers, SSE."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["bearer", "eventually", "sse_events", "wait_for"]


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    within: float = 20.0,
    what: str = "condition",
    every: float = 0.01,
) -> None:
    """Poll ``check`` (plain or async) until it holds; AssertionError naming ``what`` after
    ``within`` seconds. The default bound is generous: the test machine may be loaded, and a
    check that holds returns at once."""
    deadline = time.monotonic() + within
    while True:
        held = check()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within}s")
        await asyncio.sleep(every)


def wait_for(
    check: Callable[[], bool], what: str = "condition", within: float = 60.0, every: float = 0.05
) -> None:
    """Blocking :func:`eventually` for tests that run outside an event loop (they mostly wait
    for processes, which start slowly on a loaded machine: hence the longer default)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within}s")
        time.sleep(every)


def bearer(key: str) -> dict[str, str]:
    """The ``authorization`` header for API key ``key``."""
    return {"authorization": f"Bearer {key}"}


def sse_events(body: str) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [line[len("data: ") :] for line in body.splitlines() if line.startswith("data: ")]
