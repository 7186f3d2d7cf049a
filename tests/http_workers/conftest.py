"""HTTP workers end to end: a router whose workers are OpenAI-compatible HTTP servers, each
upstream another real turnout in front of a simulated worker (``turnout.testing.router``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest
import uvloop

from turnout.testing.router import MODEL, RunningRouter, run_router

#: The name the front router serves the upstreams' model by (the upstreams call it MODEL).
REMOTE = "remote-demo"


@pytest.fixture(scope="module")
def upstreams() -> Iterator[list[RunningRouter]]:
    """Two upstream routers, each in front of its own simulated worker."""
    with run_router() as first, run_router() as second:
        yield [first, second]


@contextlib.contextmanager
def front(
    urls: Sequence[str], config: Mapping[str, Any] | None = None, **worker: Any
) -> Iterator[RunningRouter]:
    """A router whose workers are the HTTP servers at ``urls`` (serving :data:`REMOTE`);
    ``worker``: more settings of each worker."""
    data: dict[str, Any] = {
        "workers": [{"url": url, "model": REMOTE, **worker} for url in urls],
        **dict(config or {}),
    }
    with run_router(data, sims=0) as router:
        yield router


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Async tests here run on both loops turnout serves on (uvloop's transports differ)."""
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def served_by(router: RunningRouter) -> int:
    """Chat requests the router's simulated workers received."""
    return sum(len(sim.records.requests) for sim in router.sims)


__all__ = ["MODEL", "REMOTE", "front", "served_by"]
