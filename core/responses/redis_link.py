"""One Redis shared by a router's stores (responses, conversations): one bounded connection
pool, one breaker, the settings every key shares (prefix, time to live, size bound) and every
call under the deadline ``responses.timeout_s``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Any

from turnout.config import ResponsesConfig
from turnout.redis_pool import redis_pool
from turnout.responses.breaker import Breaker
from turnout.responses.shared import guarded

#: Connections to Redis (each call holds one for a single round trip).
MAX_CONNECTIONS = 64


class RedisLink:
    """The Redis named by ``config.storage``; :meth:`call` raises
    :class:`~turnout.responses.shared.StoreUnavailable` when Redis fails or misses the
    deadline."""

    def __init__(self, config: ResponsesConfig) -> None:
        #: Fails calls at once while Redis keeps failing or hanging.
        self._breaker = Breaker("response store")
        self._pool = redis_pool(
            config.storage,
            timeout_s=config.timeout_s,
            max_connections=MAX_CONNECTIONS,
            setting="responses.storage",
        )
        from redis.asyncio import Redis  # (installed: redis_pool checked)

        self.redis = Redis(connection_pool=self._pool)
        self.key_prefix = config.key_prefix
        self.ttl_ms = max(1, round(config.ttl_s * 1000))
        self.max_bytes = config.max_bytes
        self.timeout_s = config.timeout_s

    async def call(self, operation: Awaitable[Any]) -> Any:
        """The result of one Redis call (a command, pipeline or script)."""
        return await guarded(self._breaker, operation, self.timeout_s)

    async def aclose(self) -> None:
        """Close the connections (bounded)."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.timeout_s + 1.0):
                await self._pool.aclose()
