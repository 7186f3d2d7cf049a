"""The storage of tenant budgets: a ``limits`` storage with a deadline on every call.

``memory://`` counts in this process. A Redis storage is shared by every serving process and
replica. When it fails, or does not answer within ``limits.timeout_s``, it is marked down with
one logged warning; until a background probe reaches it again, budgets are counted in this
process's memory (``on_storage_error: open``) or limited requests get 503 (``closed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from limits.aio.storage import MemoryStorage, RedisStorage, Storage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from turnout.config import LimitsConfig
from turnout.errors import ApiError
from turnout.redis_pool import redis_pool

log = logging.getLogger("turnout.tenants")

T = TypeVar("T")
#: Connections to the shared storage (each call holds one for a single round trip).
MAX_CONNECTIONS = 128


class StorageUnavailable(ApiError):
    """503: the shared budget storage is unreachable and ``on_storage_error`` is ``closed``."""

    def __init__(self) -> None:
        super().__init__(
            503,
            "rate limits cannot be checked right now (their storage is unreachable); retry later",
            code="limits_storage_unavailable",
        )


class Failed:
    """The result of an operation the shared storage failed (see :meth:`CounterStore.on`)."""


FAILED = Failed()


@dataclass(frozen=True, slots=True)
class Backend:
    """A storage and the sliding-window strategy counting in it."""

    storage: MemoryStorage | RedisStorage
    limiter: SlidingWindowCounterRateLimiter
    shared: bool


def _backend(storage: MemoryStorage | RedisStorage, shared: bool) -> Backend:
    return Backend(storage, SlidingWindowCounterRateLimiter(storage), shared)


class CounterStore:
    """Runs budget operations on the shared storage, or on this process's memory when there is
    none or it is down (see the module docstring)."""

    def __init__(self, settings: LimitsConfig) -> None:
        self.settings = settings
        self.local = _backend(MemoryStorage(), shared=False)
        self.shared: Backend | None = None
        self._pool: Any = None
        if settings.storage != "memory://":
            self._pool, storage = _redis_storage(settings)
            self.shared = _backend(storage, shared=True)
        self.down = False
        self._probe: asyncio.Task[None] | None = None

    def current(self) -> Backend:
        """The backend to count in now; raises :class:`StorageUnavailable` when failing closed."""
        shared = self.shared
        if shared is None:
            return self.local
        if not self.down:
            return shared
        if self.settings.on_storage_error == "open":
            return self.local
        raise StorageUnavailable()

    async def run(self, op: Callable[[Backend], Awaitable[T]]) -> tuple[T, Backend]:
        """``op`` on the current backend, within the deadline; if the shared storage fails, it
        is marked down and ``op`` runs again on the fallback (or 503)."""
        backend = self.current()
        if not backend.shared:
            return await op(backend), backend
        result = await self.on(backend, op)
        if not isinstance(result, Failed):
            return result, backend
        fallback = self.current()
        return await op(fallback), fallback

    async def on(self, backend: Backend, op: Callable[[Backend], Awaitable[T]]) -> T | Failed:
        """``op`` on ``backend`` within the deadline; a shared storage that fails is marked
        down and :data:`FAILED` is returned (at once while it is down)."""
        if not backend.shared:
            return await op(backend)
        if self.down:
            return FAILED
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                return await op(backend)
        except Exception as exc:  # any failure of the shared storage: count locally instead
            self._mark_down(exc)
            return FAILED

    async def check(self) -> bool:
        """Reach the shared storage once (start-up); False, logged, when it does not answer."""
        shared = self.shared
        if shared is None:
            return True
        reachable = await self._ping(shared.storage)
        if not reachable:
            self._mark_down(None)
        return reachable

    def _mark_down(self, exc: BaseException | None) -> None:
        if self.down:
            return
        self.down = True
        if exc is None:
            reason = "no answer to PING"
        elif isinstance(exc, TimeoutError):
            reason = f"no answer within the deadline of {self.settings.timeout_s:g}s"
        else:
            reason = f"{type(exc).__name__}: {exc}"
        fallback = (
            "counting budgets per process until it is back"
            if self.settings.on_storage_error == "open"
            else "refusing limited tenants (503) until it is back"
        )
        log.warning("rate-limit storage unreachable (%s): %s", reason, fallback)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.get_running_loop().create_task(self._wait_until_back())

    async def _wait_until_back(self) -> None:
        shared = self.shared
        assert shared is not None
        while self.down:
            await asyncio.sleep(self.settings.retry_interval_s)
            if await self._ping(shared.storage):
                self.down = False
                log.warning("rate-limit storage reachable again: budgets are shared again")

    async def _ping(self, storage: Storage) -> bool:
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                return await storage.check()
        except Exception:
            return False

    async def aclose(self) -> None:
        """Stop probing and close the connections to the shared storage."""
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await probe
        if self._pool is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.settings.timeout_s + 1.0):
                    await self._pool.aclose()


def _redis_storage(settings: LimitsConfig) -> tuple[Any, RedisStorage]:
    """A ``limits`` Redis storage over redis-py's asyncio client (every counter operation is
    one Lua call, one round trip), with a bounded pool and no client-side retries (the
    deadline decides)."""
    pool = redis_pool(
        settings.storage,
        timeout_s=settings.timeout_s,
        max_connections=MAX_CONNECTIONS,
        setting="limits.storage",
    )
    options: dict[str, Any] = {"connection_pool": pool}
    storage = RedisStorage(
        f"async+{settings.storage}",
        implementation="redispy",
        wrap_exceptions=True,
        key_prefix=settings.key_prefix,
        **options,
    )
    return pool, storage
