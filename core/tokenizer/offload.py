"""A few threads for CPU-heavy tokenizer work, so one long prompt does not stall the event loop.

``tokenizers`` releases the GIL in its batch encoders, so a long text encoded on one of these
threads leaves the event loop free (plain ``Tokenizer.encode`` holds the GIL throughout). At
most ``threads`` calls run at once; further callers wait in asyncio, where they can be
cancelled, and a slot is only given back when the call on the thread has really finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

R = TypeVar("R")


class Offloader:
    """Runs blocking calls on a bounded pool of threads."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="turnout-tokenizer")
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def _semaphore(self, loop: asyncio.AbstractEventLoop) -> asyncio.Semaphore:
        with self._lock:
            semaphore = self._slots.get(loop)
            if semaphore is None:
                semaphore = self._slots[loop] = asyncio.Semaphore(self.threads)
            return semaphore

    async def run(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` on a pool thread; its result or exception."""
        loop = asyncio.get_running_loop()
        semaphore = self._semaphore(loop)
        await semaphore.acquire()
        try:
            future: Future[R] = self._pool.submit(fn, *args)
        except BaseException:
            semaphore.release()
            raise

        def release(_done: Future[R]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(semaphore.release)

        # Released when the thread is done (or the call was cancelled before it started),
        # not when a cancelled caller stops waiting.
        future.add_done_callback(release)
        return await asyncio.wrap_future(future)


#: The process's tokenizer threads: as many as CPUs, at most 4 (started on first use).
_OFFLOADER = Offloader(min(4, os.cpu_count() or 1))


def offloader() -> Offloader:
    """The process's tokenizer threads."""
    return _OFFLOADER
