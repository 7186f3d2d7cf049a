"""The worker protocol's admin and side RPCs over real sockets: GetTokenizer, LoRA load/unload,
FlushCache, Start/StopProfile and the SubscribeKvEvents client, for every pair of sim server
transport (``--transport``) and client transport."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from turnout import demo_model
from turnout.sim import SimWorker
from turnout.wire import (
    ClientSettings,
    MalformedResponse,
    WorkerCallError,
    WorkerClient,
    build_generate_request,
    build_sampling_params,
    common_pb,
    pb,
)
from turnout.wire.transport import TransportName


@pytest.fixture(params=["native", "grpcio"])
def client_transport(request: pytest.FixtureRequest) -> TransportName:
    name: TransportName = request.param
    return name


@pytest.fixture
async def client(sim: SimWorker, client_transport: TransportName) -> AsyncIterator[WorkerClient]:
    async with WorkerClient(sim.url, ClientSettings(transport=client_transport)) as c:
        yield c


def _generate(rid: str, lora_id: str = "", max_tokens: int = 4) -> pb.GenerateRequest:
    return build_generate_request(
        request_id=rid,
        input_ids=[1, 2, 3],
        sampling_params=build_sampling_params(max_new_tokens=max_tokens),
        lora_id=lora_id,
    )


async def _complete(client: WorkerClient, request: pb.GenerateRequest) -> list[Any]:
    async with client.generate(request, timeout_s=10) as stream:
        return [r async for r in stream]


# -- GetTokenizer ------------------------------------------------------------------------------


async def test_get_tokenizer_is_a_zip_of_the_model_files(client: WorkerClient) -> None:
    bundle = await client.get_tokenizer(timeout_s=10)
    assert bundle.sha256 == hashlib.sha256(bundle.data).hexdigest()
    with zipfile.ZipFile(io.BytesIO(bundle.data)) as archive:
        names = set(archive.namelist())
        tokenizer_config = json.loads(archive.read("tokenizer_config.json"))
    assert {"tokenizer.json", "tokenizer_config.json", "config.json"} <= names
    assert tokenizer_config == json.loads((demo_model.path() / "tokenizer_config.json").read_text())
    # The same files make the same archive: a router can cache it by its digest.
    assert (await client.get_tokenizer(timeout_s=10)).sha256 == bundle.sha256


async def test_get_tokenizer_is_chunked_with_the_digest_on_the_last_chunk(
    sim: SimWorker, client: WorkerClient
) -> None:
    big = "x" * 300_000  # a chat template big enough for several 64 KiB chunks
    from turnout.sim.tokenizer_bundle import TokenizerArchive

    archive = TokenizerArchive(big.encode(), hashlib.sha256(big.encode()).hexdigest(), ("a",))
    sim.servicer._tokenizer_archive = archive
    pieces = list(archive.chunks())
    assert len(pieces) == 5
    assert [bool(sha) for _, sha in pieces] == [False] * 4 + [True]
    bundle = await client.get_tokenizer(timeout_s=10)
    assert bundle.data == big.encode()


async def test_get_tokenizer_with_a_wrong_digest_is_refused(
    sim: SimWorker, client: WorkerClient
) -> None:
    from turnout.sim.tokenizer_bundle import TokenizerArchive

    sim.servicer._tokenizer_archive = TokenizerArchive(b"zip bytes", "00" * 32, ("a",))
    with pytest.raises(MalformedResponse, match="sha256"):
        await client.get_tokenizer(timeout_s=10)
    sim.servicer._tokenizer_archive = TokenizerArchive(b"zip bytes", "", ("a",))
    with pytest.raises(MalformedResponse, match="without its sha256"):
        await client.get_tokenizer(timeout_s=10)


async def test_get_tokenizer_bounds_the_archive(sim: SimWorker, client: WorkerClient) -> None:
    with pytest.raises(MalformedResponse, match="larger than 1000 bytes"):
        await client.get_tokenizer(timeout_s=10, max_bytes=1000)


# -- LoRA load / unload ------------------------------------------------------------------------


async def test_lora_load_then_generate_then_unload(client: WorkerClient) -> None:
    with pytest.raises(WorkerCallError) as refused:
        await _complete(client, _generate("before", lora_id="id-1"))
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT

    loaded = await client.load_lora_adapter("sql", "/adapters/sql", "id-1", pinned=True)
    assert loaded.success
    assert loaded.message == ""
    assert list(loaded.loaded_lora_ids) == ["id-1"]
    listed = await client.list_loaded_lora_adapters()
    assert [(a.lora_name, a.lora_id, a.lora_path, a.pinned) for a in listed.loaded_adapters] == [
        ("sql", "id-1", "/adapters/sql", True)
    ]
    responses = await _complete(client, _generate("with", lora_id="id-1"))
    assert responses[-1].HasField("complete")

    again = await client.load_lora_adapter("sql", "/adapters/sql", "id-2")
    assert not again.success
    assert "already loaded" in again.message

    unloaded = await client.unload_lora_adapter("sql", "id-1")
    assert unloaded.success
    assert list(unloaded.loaded_lora_ids) == []
    with pytest.raises(WorkerCallError):
        await _complete(client, _generate("after", lora_id="id-1"))
    missing = await client.unload_lora_adapter("sql")
    assert not missing.success
    assert "not loaded" in missing.message


async def test_lora_load_needs_name_path_and_id(client: WorkerClient) -> None:
    answer = await client.load_lora_adapter("sql", "/adapters/sql", "")
    assert not answer.success
    assert "required" in answer.message


# -- FlushCache --------------------------------------------------------------------------------


async def test_flush_cache_runs_the_hooks_when_idle(sim: SimWorker, client: WorkerClient) -> None:
    flushed: list[int] = []
    sim.servicer.cache_flush_hooks.append(lambda: flushed.append(1))
    answer = await client.flush_cache()
    assert answer.success
    assert answer.message == "Cache flushed successfully"
    assert flushed == [1]
    assert sim.servicer.cache_flushes == 1


async def test_flush_cache_waits_for_running_requests_or_refuses(
    sim: SimWorker, client: WorkerClient
) -> None:
    flushed: list[int] = []
    sim.servicer.cache_flush_hooks.append(lambda: flushed.append(1))
    sim.knobs.delay_ms = 50
    async with client.generate(_generate("slow", max_tokens=8), timeout_s=10) as stream:
        await stream.__anext__()  # running now
        refused = await client.flush_cache(idle_wait_s=0)
        assert not refused.success
        assert "running" in refused.message
        assert flushed == []
        waited = await client.flush_cache(idle_wait_s=5)
        assert waited.success
        assert flushed == [1]


# -- profiler ----------------------------------------------------------------------------------


async def test_start_and_stop_profile(sim: SimWorker, client: WorkerClient) -> None:
    start = common_pb.StartProfileRequest(output_dir="/tmp/traces", num_steps=5)
    answer = await client.start_profile(start)
    assert answer.success
    assert answer.message == "Start profiling succeeded"
    assert sim.servicer.profiling is not None
    assert sim.servicer.profiling.output_dir == "/tmp/traces"
    again = await client.start_profile()
    assert not again.success
    assert "already in progress" in again.message
    stopped = await client.stop_profile()
    assert stopped.success
    assert sim.servicer.profiling is None
    not_running = await client.stop_profile()
    assert not not_running.success
    assert "not in progress" in not_running.message


# -- SubscribeKvEvents (the client; the sim's producer is served by its KV cache) -------------


def _serve_events(sim: SimWorker, cancelled: asyncio.Event, starts: list[int]) -> None:
    """Stand-in producer: numbered batches from the requested sequence on, forever."""

    async def subscribe(
        request: common_pb.SubscribeKvEventsRequest, context: Any
    ) -> AsyncIterator[common_pb.KvEventBatch]:
        starts.append(request.start_sequence_number)
        seq = max(request.start_sequence_number, 1)
        try:
            while True:
                stored = common_pb.KvBlocksStored(
                    blocks=[common_pb.KvBlock(block_hash=seq, token_ids=[seq], block_size=1)]
                )
                yield common_pb.KvEventBatch(
                    sequence_number=seq,
                    events=[common_pb.KvCacheEvent(event_id=seq, stored=stored)],
                    load=common_pb.EngineLoad(running_requests=0, sample=seq),
                )
                seq += 1
                await asyncio.sleep(0.001)
        finally:
            cancelled.set()

    sim.servicer.SubscribeKvEvents = subscribe  # type: ignore[method-assign]


@pytest.mark.parametrize("server_transport", ["grpcio", "native"])
async def test_subscribe_kv_events_streams_from_the_cursor_and_cancels(
    server_transport: str, client_transport: TransportName
) -> None:
    cancelled = asyncio.Event()
    starts: list[int] = []
    worker = SimWorker(port=0, transport=server_transport)  # type: ignore[arg-type]
    _serve_events(worker, cancelled, starts)
    async with worker, WorkerClient(worker.url, ClientSettings(transport=client_transport)) as c:
        seen = []
        async with c.subscribe_kv_events(7) as stream:
            async for batch in stream:
                seen.append(batch.sequence_number)
                if len(seen) == 5:
                    break
        assert seen == [7, 8, 9, 10, 11]
        assert starts == [7]
        assert seen
        assert batch.events[0].stored.blocks[0].token_ids == [11]
        # Leaving the stream cancels the call on the worker.
        await asyncio.wait_for(cancelled.wait(), 5)


@pytest.mark.parametrize("server_transport", ["grpcio", "native"])
async def test_subscribe_kv_events_consumer_cancelled_while_waiting(
    server_transport: str, client_transport: TransportName
) -> None:
    """A consumer task cancelled mid-stream ends the call too; a reader that does not keep up
    is held back by flow control (the worker's producer waits, nothing piles up)."""
    cancelled = asyncio.Event()
    worker = SimWorker(port=0, transport=server_transport)  # type: ignore[arg-type]
    _serve_events(worker, cancelled, [])
    async with worker, WorkerClient(worker.url, ClientSettings(transport=client_transport)) as c:

        async def consume() -> None:
            async with c.subscribe_kv_events() as stream:
                async for _batch in stream:
                    await asyncio.sleep(0.2)  # slow reader

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(cancelled.wait(), 5)


# -- Generate's token_ids_logprobs ---------------------------------------------------------------


def _wanted_request(stream: bool) -> pb.GenerateRequest:
    return build_generate_request(
        request_id=f"wanted-{stream}",
        input_ids=[1, 2, 3],
        sampling_params=build_sampling_params(max_new_tokens=3),
        stream=stream,
        return_logprob=True,
        top_logprobs_num=2,
        token_ids_logprob=[5, 9],
    )


async def test_generate_answers_the_logprobs_of_the_ids_asked_for(client: WorkerClient) -> None:
    [answer] = await _complete(client, _wanted_request(stream=False))
    complete = answer.complete
    logprobs = complete.output_logprobs
    rows = logprobs.token_ids_logprobs
    assert len(rows) == len(complete.output_ids) == 3
    for row, sampled, value, top in zip(
        rows, complete.output_ids, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        assert list(row.token_ids) == [5, 9]
        for wanted, wanted_value in zip(row.token_ids, row.values, strict=True):
            if wanted == sampled:
                assert wanted_value == pytest.approx(value)
            elif wanted in top.token_ids:  # consistent with the top logprobs
                assert wanted_value == pytest.approx(top.values[list(top.token_ids).index(wanted)])
            else:
                assert wanted_value < value
    assert complete.spec_accepted_tokens == complete.spec_draft_tokens == 0  # no speculation
    # Streamed: each chunk carries the rows of its new tokens.
    streamed = await _complete(client, _wanted_request(stream=True))
    chunks = [r.chunk for r in streamed if r.HasField("chunk")]
    chunk_rows = [row for c in chunks for row in c.output_logprobs.token_ids_logprobs]
    assert [list(r.values) for r in chunk_rows] == [list(r.values) for r in rows]
