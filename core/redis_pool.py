"""A bounded connection pool to a Redis server, shared by the features that keep state there
(tenant budgets, the Responses API's store): redis-py's asyncio client, at most
``max_connections`` connections, every wait and socket operation bounded by ``timeout_s`` and
no client-side retries (the caller's deadline decides)."""

from __future__ import annotations

import importlib.util
from typing import Any

from turnout.errors import StartupError


def redis_pool(url: str, *, timeout_s: float, max_connections: int, setting: str) -> Any:
    """A ``redis.asyncio.BlockingConnectionPool`` for ``url``; ``setting`` names the config
    field in the start-up error raised when the Redis client is not installed."""
    if importlib.util.find_spec("redis") is None:
        raise StartupError(
            f"{setting} is {url}: install the Redis client with pip install 'turnout[redis]'"
        )
    from redis.asyncio import BlockingConnectionPool
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=timeout_s,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )
