"""Stopping early is real: the gRPC call is cancelled and the worker gets an Abort."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support import eventually
from turnout.sim import SimWorker
from turnout.wire import WorkerCallError, WorkerClient, pb

from ._helpers import fold, request

LONG = " ".join(["word"] * 200)


def _spy_on_aborts(client: WorkerClient, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The request ids the client sends an Abort for, in order."""
    asked: list[str] = []
    send_abort = client.abort

    async def abort(request_id: str, reason: str = "", **kwargs: Any) -> pb.AbortResponse:
        asked.append(request_id)
        return await send_abort(request_id, reason, **kwargs)

    monkeypatch.setattr(client, "abort", abort)
    return asked


async def _assert_abort_sent_at_once(asked: list[str], rid: str) -> None:
    """The client sends the Abort within a few turns of the loop, however long each takes.

    Promptness is checked on the client's side, in loop turns: how many tokens the worker makes
    after the stop also times its grpcio server, which a loaded machine stretches.
    """
    for _ in range(3):
        if asked:
            break
        await asyncio.sleep(0)
    assert asked == [rid]


async def _assert_stopped_early(sim: SimWorker, rid: str) -> None:
    await eventually(lambda: rid in sim.aborted and sim.running == 0, within=10)
    # Stopped before the end of its ~200-token answer.
    assert sim.records.outcomes[rid] in {"cancelled", "abort"}


async def test_aclose_cancels_and_aborts(
    sim: SimWorker, client: WorkerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim.knobs.delay_ms = 5
    asked = _spy_on_aborts(client, monkeypatch)
    stream = client.generate(request(LONG, request_id="close-me", max_new_tokens=400))
    got = 0
    async for response in stream:
        got += len(response.chunk.token_ids)
        if got >= 3:
            break
    await stream.aclose()
    await _assert_abort_sent_at_once(asked, "close-me")
    await _assert_stopped_early(sim, "close-me")
    # The stream is over for the consumer too.
    assert [r async for r in stream] == []


async def test_leaving_async_with_aborts(
    sim: SimWorker, client: WorkerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim.knobs.delay_ms = 5
    asked = _spy_on_aborts(client, monkeypatch)
    async with client.generate(request(LONG, request_id="ctx", max_new_tokens=400)) as stream:
        async for _ in stream:
            break
    await _assert_abort_sent_at_once(asked, "ctx")
    await _assert_stopped_early(sim, "ctx")


async def test_cancelled_consumer_task_aborts(
    sim: SimWorker, client: WorkerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim.knobs.delay_ms = 5
    asked = _spy_on_aborts(client, monkeypatch)
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in client.generate(request(LONG, request_id="task", max_new_tokens=400)):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _assert_abort_sent_at_once(asked, "task")
    await _assert_stopped_early(sim, "task")


async def test_cancel_from_another_task_ends_iteration(
    sim: SimWorker, client: WorkerClient
) -> None:
    sim.knobs.delay_ms = 5
    stream = client.generate(request(LONG, request_id="other", max_new_tokens=400))
    first = await anext(stream)
    assert first.HasField("chunk")
    asyncio.get_running_loop().call_later(0.03, stream.cancel)
    rest = [r async for r in stream]  # ends quietly, no CancelledError for this task
    assert len(rest) < 100
    await eventually(lambda: "other" in sim.aborted)


async def test_finished_stream_sends_no_abort(sim: SimWorker, client: WorkerClient) -> None:
    out = await fold(client.generate(request("short one", request_id="done", n=2)))
    assert len(out.completes) == 2
    # Stopping right after the last complete (before the end of stream) is not an abort either.
    async with client.generate(request("short", request_id="done2")) as stream:
        async for response in stream:
            if response.HasField("complete"):
                break
    await asyncio.sleep(0.1)
    assert sim.aborted == []
    assert sim.records.outcomes["done"] == "stop"


async def test_abort_rpc_ends_the_stream_with_abort(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.delay_ms = 5
    stream = client.generate(request(LONG, request_id="kill", max_new_tokens=400, n=2))
    await anext(stream)
    answer = await client.abort("kill", "test")
    assert answer.success
    assert "aborted" in answer.message
    out_completes = [r.complete async for r in stream if r.HasField("complete")]
    assert sorted(c.index for c in out_completes) == [0, 1]
    assert {c.finish_reason for c in out_completes} == {"abort"}
    assert sim.records.outcomes["kill"] == "abort"
    unknown = await client.abort("no-such-request")
    assert not unknown.success
    assert "not found" in unknown.message


async def test_deadline_exceeded_aborts_on_the_worker(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.hang = True
    stream = client.generate(request("hi", request_id="slow"), timeout_s=0.2)

    with pytest.raises(WorkerCallError) as info:
        await anext(stream)
    assert info.value.http_status == 504
    assert info.value.worker_fault
    await eventually(lambda: "slow" in sim.aborted)


async def test_dropped_stream_is_aborted_when_collected(
    sim: SimWorker, client: WorkerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    sim.knobs.delay_ms = 5
    asked = _spy_on_aborts(client, monkeypatch)
    stream = client.generate(request(LONG, request_id="dropped", max_new_tokens=400))
    await anext(stream)
    del stream
    gc.collect()
    await _assert_abort_sent_at_once(asked, "dropped")
    await _assert_stopped_early(sim, "dropped")
