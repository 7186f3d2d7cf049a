"""``WorkerClient.embed`` on both transports against the simulator: the answer, the trace
context as metadata, worker errors as ``WorkerCallError``, and a cancelled call that aborts."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from turnout.sim import SimWorker
from turnout.sim.embedding import DEFAULT_EMBEDDING_DIM, embed_ids
from turnout.wire import WorkerCallError, WorkerClient, pb

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def embed_request(ids: list[int], rid: str = "e") -> pb.EmbedRequest:
    return pb.EmbedRequest(request_id=rid, tokenized=pb.TokenizedInput(input_ids=ids))


async def test_embed_answers_with_metadata(sim: SimWorker, client: WorkerClient) -> None:
    answer = await client.embed(
        embed_request([11, 12, 13], "e1"), metadata=[("traceparent", TRACEPARENT)]
    )
    assert answer.prompt_tokens == 3
    assert list(answer.embedding) == pytest.approx(
        embed_ids([11, 12, 13], DEFAULT_EMBEDDING_DIM), abs=1e-6
    )
    assert sim.records.metadata["e1"] == {"traceparent": TRACEPARENT}


async def test_a_worker_failure_is_a_call_error(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
    with pytest.raises(WorkerCallError) as info:
        await client.embed(embed_request([5]))
    assert info.value.code == grpc.StatusCode.UNAVAILABLE
    assert info.value.worker_fault
    assert (await client.embed(embed_request([5]))).prompt_tokens == 1  # the budget is spent


async def test_a_cancelled_embed_is_aborted_on_the_worker(
    sim: SimWorker, client: WorkerClient
) -> None:
    sim.knobs.update({"hang": True})
    call = asyncio.ensure_future(client.embed(embed_request([5, 6], "stuck")))
    for _ in range(200):
        if sim.records.embed_requests:
            break
        await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    for _ in range(200):
        if sim.records.aborted:
            break
        await asyncio.sleep(0.01)
    assert sim.records.aborted == ["stuck"]


async def test_the_deadline_bounds_a_silent_worker(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.update({"ttft_ms": 5000})
    with pytest.raises(WorkerCallError) as info:
        await client.embed(embed_request([5]), timeout_s=0.2)
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
