"""Helpers of the admission tests: routers with classes in front of ``turnout sim`` workers,
and closed loops of clients that keep a class (or a tenant) backlogged."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.ops.helpers import chat
from turnout.sim import SimWorker

CHAT = "/v1/chat/completions"


def classes(**shares: float) -> list[dict[str, Any]]:
    """The four default classes, highest first, with the given shares (others 0)."""
    return [
        {"name": name, "share": shares.get(name, 0.0), "queue_size": 100, "queue_timeout_s": 30}
        for name in ("system", "interactive", "default", "bulk")
    ]


def admission(**settings: Any) -> dict[str, Any]:
    """An ``admission`` section: on, no ageing, the hard ceiling only unless told."""
    return {"enabled": True, "aging_s": 0, "engine_capacity": False, **settings}


@dataclass
class Done:
    """One answered request: when it ended and the tokens it used."""

    ended: float
    tokens: int
    status: int


@dataclass
class Loop:
    """The answers of one closed loop of clients."""

    done: list[Done] = field(default_factory=list)

    def tokens_between(self, start: float, end: float) -> int:
        return sum(d.tokens for d in self.done if start <= d.ended <= end and d.status == 200)

    def count_between(self, start: float, end: float) -> int:
        return sum(1 for d in self.done if start <= d.ended <= end and d.status == 200)


async def closed_loop(
    http: httpx.AsyncClient,
    base_url: str,
    loop: Loop,
    *,
    clients: int,
    until: float,
    headers: dict[str, str] | None = None,
    text: str = "a short question",
    max_tokens: int = 8,
) -> None:
    """``clients`` clients each sending one chat after another until ``until`` (monotonic)."""

    async def one_client() -> None:
        while time.monotonic() < until:
            response = await http.post(
                f"{base_url}{CHAT}",
                json=chat(text, max_tokens=max_tokens),
                headers=headers or {},
            )
            tokens = 0
            if response.status_code == 200:
                usage = response.json()["usage"]
                tokens = usage["prompt_tokens"] + usage["completion_tokens"]
            loop.done.append(Done(time.monotonic(), tokens, response.status_code))

    await asyncio.gather(*(one_client() for _ in range(clients)))


@dataclass
class Peak:
    """The most Generate calls a sim ran at once since the last :meth:`take`."""

    value: int = 0

    def take(self) -> int:
        """The peak so far; start again from zero."""
        peak, self.value = self.value, 0
        return peak


@contextlib.asynccontextmanager
async def peak_running(sim: SimWorker) -> AsyncIterator[Peak]:
    """Watch ``sim``'s running calls (every 5 ms) while the block runs."""
    peak = Peak()

    async def watch() -> None:
        while True:
            peak.value = max(peak.value, sim.running)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    try:
        yield peak
    finally:
        watcher.cancel()
