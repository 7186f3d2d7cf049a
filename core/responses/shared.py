"""What the shared stores (Redis, PostgreSQL) have in common: every call under a breaker and a
deadline, and one error for a store that fails or misses it (503
``response_store_unavailable``, never a stall or a 500)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from turnout.errors import ApiError
from turnout.responses.breaker import Breaker


class StoreUnavailable(ApiError):
    """503: the shared response store failed or did not answer in time."""

    def __init__(self) -> None:
        super().__init__(
            503,
            "the response store is unreachable right now; retry later",
            code="response_store_unavailable",
        )


async def guarded(breaker: Breaker, operation: Awaitable[Any], timeout_s: float) -> Any:
    """The result of one call to a shared store, under ``breaker`` and the deadline
    ``timeout_s``; :class:`StoreUnavailable` when it fails, misses the deadline or the
    breaker is open."""
    if not breaker.admit():
        close = getattr(operation, "close", None)  # a coroutine that will never run
        if close is not None:
            close()
        raise StoreUnavailable()
    try:
        async with asyncio.timeout(timeout_s):
            result = await operation
    except asyncio.CancelledError:
        breaker.abandoned()
        raise
    except Exception as exc:
        breaker.failed(_reason(exc, timeout_s))
        raise StoreUnavailable() from exc
    breaker.succeeded()
    return result


def _reason(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within the deadline of {timeout_s:g}s"
    return f"{type(exc).__name__}: {exc}"
