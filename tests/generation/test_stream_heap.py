"""What an open stream costs the cyclic garbage collector on the worker side, and what it leaves
to it: the real chat flow over the real dispatcher and wire client, against a simulated worker.

A paced stream spends nearly all its life waiting for the worker's next message; with thousands
of them open, every young collection walks their objects. So the objects a waiting stream keeps
tracked (generation, routing, wire, tokenizer, metrics) are held to a budget, and a stream that
ends (cancelled, or failed by its worker) must leave no reference cycle behind: cyclic garbage
is freed only by a collection that has to walk everything first.
"""

from __future__ import annotations

import asyncio
import gc
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

import turnout
from turnout import demo_model
from turnout.config import load_config
from turnout.generation import chat
from turnout.generation.context import RequestContext
from turnout.generation.flow import PayloadStream, Streamed, run_endpoint
from turnout.generation.models import ModelTable
from turnout.generation.pipeline import Opener
from turnout.generation.requests import ChatCompletionRequest
from turnout.observability.metrics import Metrics
from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.types import RoutingRequest
from turnout.sim import SimWorker
from turnout.wire import pb
from turnout.workers.errors import WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import HealthSettings, WorkerSpec, WorkersSettings

MODEL = "turnout-demo"
STREAMS = 20
#: The worker side's modules: their objects and coroutines are what an open stream is charged.
OURS = (
    "turnout.generation.",
    "turnout.routing.",
    "turnout.wire.",
    "turnout.tokenizer.",
    "turnout.observability.metrics",
)
_PACKAGE = Path(turnout.__file__).parent
OUR_FILES = tuple(
    str(_PACKAGE / name)
    for name in ("generation", "routing", "wire", "tokenizer", "observability/metrics.py")
)
#: Tracked objects one waiting stream keeps on the worker side: 19.5 measured (the flow's
#: payload stream and event source, the choice's processor and detokenizer, the renderer, the
#: meter, the dispatcher's session, the wire stream and call with its queue, the read's future
#: and its wake-up, three coroutines, two or three lists). It was 35.5 before the one-shot
#: answer's lists were made only for one-shot answers, the session's deque, the payload
#: stream's lists of sessions and sent openings, the per-call parser, the per-choice call-id
#: maker, the event walker's separate state object and the policy's routing facts (kept only
#: for a policy with a done hook) were dropped.
BUDGET = 20


def _ours(obj: Any) -> bool:
    if isinstance(obj, types.CoroutineType):
        filename = obj.cr_code.co_filename
        return filename.startswith(OUR_FILES)
    return type(obj).__module__.startswith(OURS)


def _stops_walk(obj: Any) -> bool:
    """Objects that are not the stream's own: shared ones, and other layers' (the task that
    runs the stream and its context belong to the HTTP side; the worker simulator's)."""
    if isinstance(obj, (type, types.ModuleType, types.FunctionType, asyncio.Task)):
        return True
    if isinstance(obj, types.CoroutineType):
        return not _ours(obj)
    module = type(obj).__module__
    if module.startswith("turnout.") and not _ours(obj):
        return True
    return type(obj).__name__ in ("Context", "hamt")


def tracked_per_stream(before: set[int]) -> tuple[float, dict[str, int]]:
    """The tracked objects reachable from the worker side's coroutines and payload streams that
    did not exist in ``before`` (ids), per stream, with a count per type."""
    gc.collect()
    roots = [o for o in gc.get_objects() if id(o) not in before and _ours(o)]
    seen: dict[int, Any] = {}
    todo = [
        o for o in roots if isinstance(o, types.CoroutineType) or type(o).__name__ == "_Payloads"
    ]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or id(obj) in before or not gc.is_tracked(obj) or _stops_walk(obj):
            continue
        seen[id(obj)] = obj
        todo.extend(gc.get_referents(obj))
    counts: dict[str, int] = {}
    for obj in seen.values():
        name = type(obj).__qualname__
        if isinstance(obj, types.CoroutineType):
            name = f"coroutine {obj.cr_code.co_qualname}"
        counts[name] = counts.get(name, 0) + 1
    del roots, todo
    return len(seen) / STREAMS, counts


def our_garbage() -> list[str]:
    """Collect with ``DEBUG_SAVEALL``: the worker side's objects that were in reference cycles
    (or only reachable from one), and exceptions raised through its frames."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found = []
        for obj in gc.garbage:
            if _ours(obj):
                found.append(type(obj).__qualname__)
            elif isinstance(obj, types.TracebackType):
                filename = obj.tb_frame.f_code.co_filename
                if filename.startswith(OUR_FILES):
                    found.append(f"traceback {obj.tb_frame.f_code.co_qualname}")
        return found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


class Backend:
    """The flow's backend as the app makes it: the dispatcher opens, the metrics meter."""

    def __init__(self, dispatcher: Dispatcher, models: ModelTable) -> None:
        self._dispatcher = dispatcher
        self._metrics = Metrics()
        self.models = models
        self.tracing = None

    @property
    def open_stream(self) -> Opener:
        async def open_stream(
            model: str, routing: RoutingRequest, request: pb.GenerateRequest
        ) -> Any:
            session = await self._dispatcher.open_stream(model, routing, request, 60)
            session.meter = self._metrics.meter(model, None)
            return session

        return open_stream


@pytest.fixture(scope="module")
def models() -> ModelTable:
    config = load_config(None, {"defaults.tokenizer_path": str(demo_model.path())})
    return ModelTable(config, turnout.load_plugins(), lambda: [MODEL])


@pytest.fixture
async def sim() -> AsyncIterator[SimWorker]:
    # A paced worker: 4 tokens a message, a message every 200 ms (the streams stay open).
    worker = SimWorker(
        demo_model.path(),
        port=0,
        served_model_name=MODEL,
        transport="native",
        delay_ms=50,
        tokens_per_chunk=4,
    )
    async with worker:
        yield worker


@pytest.fixture
async def backend(sim: SimWorker, models: ModelTable) -> AsyncIterator[Backend]:
    # No wedge or staleness verdicts: on a loaded test machine one would cut the streams
    # this test holds open (what it measures is their heap, not failover).
    health = HealthSettings(wedge_after_s=600, stale_after_s=600)
    registry = WorkerRegistry(
        WorkersSettings(workers=[WorkerSpec(url=sim.url, model=MODEL)], health=health)
    )
    await registry.start()
    try:
        for worker in registry.all():
            assert await registry.wait_ready(worker.id, 30)
        yield Backend(Dispatcher(registry, default_policy=RoundRobinPolicy), models)
    finally:
        await registry.stop()


async def start(backend: Backend, i: int, max_tokens: int = 4000) -> PayloadStream:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"hello there {i}"}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = msgspec.json.decode(msgspec.json.encode(body), type=ChatCompletionRequest)
    ctx = RequestContext(f"chatcmpl-{i}", {}, None)
    answer = await run_endpoint(chat.ENDPOINT, request, ctx, backend)
    assert isinstance(answer, Streamed)
    return answer.payloads


async def read(payloads: PayloadStream, reading: asyncio.Event) -> None:
    """Read two lists of payloads, then wait in the flow for the next one."""
    await payloads.__anext__()
    await payloads.__anext__()
    reading.set()
    await payloads.__anext__()  # waits in the flow until the test cancels it


async def test_an_open_stream_keeps_few_tracked_objects_and_leaves_no_cycles(
    backend: Backend, no_gc: None
) -> None:
    await (await start(backend, -1, 8)).aclose()  # warm: tokenizer, templates, connection
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    streams = [await start(backend, i) for i in range(STREAMS)]
    reading = [asyncio.Event() for _ in streams]
    readers = [asyncio.create_task(read(s, r)) for s, r in zip(streams, reading, strict=True)]
    async with asyncio.timeout(30):
        for event in reading:
            await event.wait()
    await asyncio.sleep(0)  # every reader is back waiting in the flow
    per_stream, counts = tracked_per_stream(before)
    del before
    assert per_stream <= BUDGET, str(sorted(counts.items(), key=lambda kv: -kv[1]))
    # The client goes away: the reader is cancelled and the stream closed (the worker aborts).
    for task in readers:
        task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    for stream in streams:
        await stream.aclose()
    del readers, streams, task, stream
    await asyncio.sleep(0.1)
    assert our_garbage() == []


async def test_a_stream_its_worker_fails_leaves_no_cycles(
    backend: Backend, sim: SimWorker, no_gc: None
) -> None:
    sim.knobs.update({"fail_after_tokens": 8, "fail_after_status": "UNAVAILABLE"})
    failed = 0
    for i in range(5):
        payloads = await start(backend, i)
        try:
            async with asyncio.timeout(30):
                async for _ in payloads:
                    pass
        except WorkerRequestError:
            failed += 1
        del payloads
    assert failed == 5
    await asyncio.sleep(0.1)
    assert our_garbage() == []
