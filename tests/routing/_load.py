"""A closed-loop HTTP load for the fault tests: N clients, each sending its next request when
the previous one is answered, for a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class LoadResult:
    """What the clients saw."""

    #: Requests answered 200.
    completions: int = 0
    #: Other answers by status (0: no answer at all: transport error or client timeout).
    failures: Counter[int] = field(default_factory=Counter)
    #: The transport errors and timeouts behind the failures with status 0, as
    #: ``ExceptionType: message``, so that a rare one names its cause in the test log.
    transport_errors: Counter[str] = field(default_factory=Counter)
    #: Seconds from sending each request to its complete answer.
    waits: list[float] = field(default_factory=list)

    @property
    def worst_wait_s(self) -> float:
        """The longest wait of any request."""
        return max(self.waits, default=0.0)

    def percentile(self, q: float) -> float:
        """The wait below which a fraction ``q`` of the requests were answered."""
        waits = sorted(self.waits)
        return waits[min(int(q * len(waits)), len(waits) - 1)] if waits else 0.0

    def summary(self) -> str:
        """One line for the test log."""
        return (
            f"{self.completions} completions, failures {dict(self.failures)}"
            + (f" ({dict(self.transport_errors)})" if self.transport_errors else "")
            + ", waits "
            f"p50 {self.percentile(0.5):.2f}s p99 {self.percentile(0.99):.2f}s "
            f"worst {self.worst_wait_s:.2f}s over {len(self.waits)} requests"
        )


async def closed_loop(
    url: str, body: dict[str, Any], *, clients: int, duration_s: float, timeout_s: float
) -> LoadResult:
    """Run ``clients`` clients against ``url`` for ``duration_s``; requests in flight at the end
    are waited for (each up to ``timeout_s``)."""
    result = LoadResult()
    stop_at = time.monotonic() + duration_s
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=timeout_s) as client:

        async def one_client() -> None:
            while time.monotonic() < stop_at:
                start = time.monotonic()
                try:
                    response = await client.post(url, json=body)
                    status = response.status_code
                except httpx.HTTPError as exc:
                    status = 0
                    result.transport_errors[f"{type(exc).__name__}: {exc}"] += 1
                result.waits.append(time.monotonic() - start)
                if status == 200:
                    result.completions += 1
                else:
                    result.failures[status] += 1

        await asyncio.gather(*(one_client() for _ in range(clients)))
    return result
