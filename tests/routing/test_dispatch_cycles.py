"""A request its workers fail before the first response, after a retry, leaves no reference
cycle behind: the dispatcher's frames must not keep the errors whose tracebacks hold them.
Cyclic garbage is freed only by a collection that walks every tracked object first, which
with thousands of open streams takes long."""

from __future__ import annotations

import gc
import types
from pathlib import Path
from typing import Any

import turnout
from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.sim import SimWorker
from turnout.workers.errors import WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import WorkerSpec

from ..wire._helpers import request
from .conftest import fast_settings
from .test_pd_dispatch import MODEL, routing

_PACKAGE = Path(turnout.__file__).parent
OURS = ("turnout.routing.", "turnout.wire.")
OUR_FILES = tuple(str(_PACKAGE / name) for name in ("routing", "wire"))


def our_garbage() -> list[str]:
    """Collect with ``DEBUG_SAVEALL``: routing and wire objects that were cyclic garbage (or
    only reachable from some), and tracebacks through their frames."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = []
        for obj in gc.garbage:
            if type(obj).__module__.startswith(OURS):
                found.append(type(obj).__qualname__)
            elif isinstance(obj, types.TracebackType):
                code = obj.tb_frame.f_code
                if code.co_filename.startswith(OUR_FILES):
                    found.append(f"traceback {code.co_qualname}")
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


async def failed_open(dispatcher: Any, text: str) -> int:
    """Open a stream that every attempt fails; the error's status (the error is dropped)."""
    try:
        await dispatcher.open_stream(
            MODEL, routing(text), request(text, request_id=text, max_new_tokens=4), 30
        )
    except WorkerRequestError as exc:
        return exc.status
    raise AssertionError("the stream opened")


async def test_a_request_failed_after_a_retry_leaves_no_cycles(no_gc: None) -> None:
    sims = [await SimWorker(port=0, fail_status="UNAVAILABLE").start() for _ in range(2)]
    registry = WorkerRegistry(fast_settings([WorkerSpec(url=s.url) for s in sims]))
    await registry.start()
    try:
        for worker in registry.all():
            assert await registry.wait_ready(worker.id, 10)
        dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
        assert [await failed_open(dispatcher, f"retried {i}") for i in range(3)] == [503] * 3
        assert our_garbage() == []
    finally:
        await registry.stop()
        for sim in sims:
            await sim.stop()
