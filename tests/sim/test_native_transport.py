"""The simulator's native gRPC server (``transport="native"``) spoken to by real clients: grpcio,
turnout's own HTTP/2 client, turnout's router end to end, and smg (``-m slow``)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import httpx
import openai
import pytest

from tests.support import eventually
from turnout import demo_model
from turnout.sim import SimProcess, SimWorker, get_records, set_knobs
from turnout.wire import WorkerCallError, WorkerClient, pb
from turnout.wire.http2 import ConnectionSettings, Http2Connection
from turnout.wire.proto import sglang_scheduler_pb2_grpc as pb_grpc

from ..server.harness import MODEL, free_port, run_router
from ..wire._helpers import decode, fold, request

PATH_GENERATE = "/sglang.grpc.scheduler.SglangScheduler/Generate"


@pytest.fixture
async def native() -> AsyncIterator[SimWorker]:
    async with SimWorker(port=0, transport="native") as worker:
        yield worker


@contextlib.asynccontextmanager
async def stub_for(sim: SimWorker) -> AsyncIterator[pb_grpc.SglangSchedulerStub]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{sim.port}") as channel:
        yield pb_grpc.SglangSchedulerStub(channel)  # type: ignore[no-untyped-call]


# -- grpcio's client ----------------------------------------------------------------------------


async def test_grpcio_streams_generate_and_calls_every_unary_rpc(native: SimWorker) -> None:
    async with stub_for(native) as stub:
        call = stub.Generate(request("one two three four five", request_id="g1"), timeout=10)
        responses = [r async for r in call]
        assert await call.code() == grpc.StatusCode.OK
        chunks = [r for r in responses if r.HasField("chunk")]
        assert len(chunks) > 1
        ids = [t for r in chunks for t in r.chunk.token_ids]
        assert decode(ids, skip_special=True) == "one two three four five"
        assert responses[-1].complete.finish_reason == "stop"

        health = await stub.HealthCheck(pb.HealthCheckRequest(), timeout=5)
        assert health.healthy
        info = await stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
        assert info.weight_version.startswith("turnout-sim")
        server = await stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=5)
        assert server.server_type == "turnout-sim"
        loads = await stub.GetLoads(pb.GetLoadsRequest(), timeout=5)
        assert loads.dp_rank_count == 1
        aborted = await stub.Abort(pb.AbortRequest(request_id="nobody"), timeout=5)
        assert not aborted.success
        embedded = await stub.Embed(
            pb.EmbedRequest(request_id="e1", tokenized=pb.TokenizedInput(input_ids=[5, 6])),
            timeout=5,
        )
        assert embedded.prompt_tokens == 2
        native.knobs.update({"lists_adapters": False})
        with pytest.raises(grpc.aio.AioRpcError) as info_error:
            await stub.ListLoadedLoRAAdapters(pb.ListLoadedLoRAAdaptersRequest(), timeout=5)
        assert info_error.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert native.aborted == ["nobody"]
    assert (await get_records(native.url))["embeds"] == ["e1"]


async def test_grpcio_gets_error_statuses_with_percent_encoded_messages(
    native: SimWorker,
) -> None:
    async with stub_for(native) as stub:
        unknown_adapter = request()
        unknown_adapter.lora_id = "ad-ü 100%"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            # a trailers-only answer: the failure comes before any message
            await anext(aiter(stub.Generate(unknown_adapter, timeout=5)))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert caught.value.details() == "LoRA adapter 'ad-ü 100%' is not loaded"

        native.knobs.update({"fail_after_tokens": 2, "fail_after_status": "UNAVAILABLE"})
        call = stub.Generate(request("a b c d e f"), timeout=5)
        assert (await anext(aiter(call))).HasField("chunk")  # messages, then the status
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            _ = [r async for r in call]
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "after 2 tokens" in (caught.value.details() or "")

    async with grpc.aio.insecure_channel(f"127.0.0.1:{native.port}") as channel:
        method = channel.unary_unary("/sglang.grpc.scheduler.SglangScheduler/NoSuchMethod")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await method(b"", timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_grpcio_metadata_reaches_the_servicer(native: SimWorker) -> None:
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with stub_for(native) as stub:
        for i in range(3):
            call = stub.Generate(
                request(request_id=f"m{i}"),
                metadata=(("traceparent", traceparent), ("x-blob-bin", b"\x00\x01")),
                timeout=5,
            )
            _ = [r async for r in call]
    for i in range(3):
        assert native.records.metadata[f"m{i}"] == {"traceparent": traceparent}


async def test_grpcio_cancel_mid_stream_cancels_the_call(native: SimWorker) -> None:
    native.knobs.update({"delay_ms": 20})
    async with stub_for(native) as stub:
        call = stub.Generate(request("w " * 100, request_id="c1", max_new_tokens=200), timeout=10)
        await anext(aiter(call))
        assert native.running == 1
        call.cancel()
        await eventually(lambda: native.running == 0)
    assert native.running == 0
    assert native.records.outcomes["c1"] == "cancelled"


async def test_grpcio_deadline_ends_the_call(native: SimWorker) -> None:
    native.knobs.update({"hang": True})
    async with stub_for(native) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Embed(
                pb.EmbedRequest(request_id="h", tokenized=pb.TokenizedInput(input_ids=[1])),
                timeout=0.3,
            )
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_grpcio_header_blocks_use_huffman_and_the_dynamic_table(native: SimWorker) -> None:
    """grpcio's client encodes headers with dynamic-table entries, and binary metadata with
    Huffman strings; a recording TCP relay checks it did, and the native server decoded them."""
    seen = bytearray()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, log: bool) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                if log:
                    seen.extend(data)
                writer.write(data)
                await writer.drain()
        writer.close()

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", native.port)
        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.SglangSchedulerStub(channel)  # type: ignore[no-untyped-call]
        for i in range(3):
            call = stub.Generate(
                request(request_id=f"h{i}"),
                metadata=(("x-custom", "same value"), ("x-blob-bin", b"\x00\xff" * 20)),
                timeout=5,
            )
            _ = [r async for r in call]
    blocks = header_blocks(bytes(seen))
    assert len(blocks) >= 3
    assert any(uses_huffman(b) for b in blocks)
    assert any(uses_dynamic_index(b) for b in blocks[1:])
    assert [r.request_id for r in native.requests] == ["h0", "h1", "h2"]


def header_blocks(data: bytes) -> list[bytes]:
    """The HEADERS payloads (no padding/priority: grpcio sends none) after the preface."""
    pos, blocks = 24, []
    while pos + 9 <= len(data):
        high, low, kind, _, _ = struct.unpack_from(">BHBBI", data, pos)
        length = (high << 16) | low
        if kind == 0x1:
            blocks.append(data[pos + 9 : pos + 9 + length])
        pos += 9 + length
    return blocks


def _fields(block: bytes) -> Iterator[tuple[int, int, bool]]:
    """(representation byte, index, a string in it is Huffman-coded) per field."""

    def integer(pos: int, bits: int) -> tuple[int, int]:
        limit = (1 << bits) - 1
        value = block[pos] & limit
        pos += 1
        if value == limit:
            shift = 0
            while True:
                value += (block[pos] & 0x7F) << shift
                shift += 7
                pos += 1
                if not block[pos - 1] & 0x80:
                    break
        return value, pos

    pos = 0
    while pos < len(block):
        first = block[pos]
        if first & 0x80:
            index, pos = integer(pos, 7)
            yield first, index, False
            continue
        if first & 0xE0 == 0x20:
            _, pos = integer(pos, 5)
            continue
        index, pos = integer(pos, 6 if first & 0x40 else 4)
        huffman = False
        for _ in range(1 if index else 2):
            huffman |= bool(block[pos] & 0x80)
            length, pos = integer(pos, 7)
            pos += length
        yield first, index, huffman


def uses_huffman(block: bytes) -> bool:
    return any(huffman for _, _, huffman in _fields(block))


def uses_dynamic_index(block: bytes) -> bool:
    return any(index > 61 for _, index, _ in _fields(block))


# -- turnout's own client -----------------------------------------------------------------------


async def test_turnout_client_streams_and_aborts(native: SimWorker) -> None:
    async with WorkerClient(native.url) as client:
        folded = await fold(client.generate(request("x y z", request_id="t1")))
        assert folded.text(skip_special=True) == "x y z"
        native.knobs.update({"delay_ms": 20})
        stream = client.generate(request("w " * 100, request_id="t2", max_new_tokens=200))
        await anext(stream)
        await stream.aclose()  # the client cancels: RST_STREAM (and an Abort call)
        await eventually(lambda: native.running == 0)
        assert native.running == 0
        assert native.records.outcomes["t2"] in {"cancelled", "abort"}
        with pytest.raises(WorkerCallError) as caught:
            await client.get_loads(["everything"])
        assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_reader_that_stops_pauses_its_stream(native: SimWorker) -> None:
    """The client never credits the stream window: the sim sends one window's worth, then its
    generator waits (bounded), and resumes once the reader reads."""
    received = bytearray()
    ended = asyncio.Event()

    class Reader:
        def on_headers(self, headers: Any, end_stream: bool) -> None:
            if end_stream:
                ended.set()

        def on_data(self, data: bytes, end_stream: bool) -> None:
            received.extend(data)

        def on_reset(self, error_code: int) -> None:
            ended.set()

        def on_closed(self, reason: str, refused: bool) -> None:
            ended.set()

    loop = asyncio.get_running_loop()
    _, connection = await loop.create_connection(
        lambda: Http2Connection(ConnectionSettings(stream_window=65_535)), "127.0.0.1", native.port
    )
    try:
        body = request("w " * 10, request_id="slow", max_new_tokens=6000, ignore_eos=True)
        message = body.SerializeToString()
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", PATH_GENERATE),
            (":authority", "sim"),
            ("te", "trailers"),
            ("content-type", "application/grpc"),
        ]
        stream_id = connection.open_stream(
            Reader(), headers, b"\x00" + len(message).to_bytes(4, "big") + message
        )
        generated = -1
        for _ in range(100):  # until the generator stopped: paused by flow control
            await asyncio.sleep(0.1)
            now = native.records.generated.get("slow", 0)
            if now == generated:
                break
            generated = now
        assert 0 < generated < 6000
        assert len(received) <= 65_535
        assert native.running == 1
        deadline, credited = time.monotonic() + 10, 0
        while not ended.is_set() and time.monotonic() < deadline:  # now read: credit it
            connection.consume(stream_id, len(received) - credited)
            credited = len(received)
            await asyncio.sleep(0.01)
        assert ended.is_set()
        assert native.records.generated["slow"] == 6000
        assert native.records.outcomes["slow"] == "length"
    finally:
        connection.close()


async def test_stop_and_resume_serving(native: SimWorker) -> None:
    async with WorkerClient(native.url) as client:
        assert (await client.health_check()).healthy
    await native.stop_serving()
    with pytest.raises(grpc.aio.AioRpcError):
        await get_records(native.url, timeout_s=1)
    await native.resume_serving()
    assert (await get_records(native.url))["running"] == 0


async def test_stop_with_grace_lets_calls_finish() -> None:
    sim = await SimWorker(port=0, transport="native", delay_ms=5).start()
    async with stub_for(sim) as stub:
        call = stub.Generate(request("a b c d e f g h", request_id="g"), timeout=10)
        await anext(aiter(call))
        stopping = asyncio.create_task(sim.stop(grace=5))
        rest = [r async for r in call]
        await stopping
    assert rest[-1].complete.finish_reason == "stop"


async def test_subprocess_with_the_native_transport() -> None:
    async with SimProcess("--transport", "native", "--delay-ms", "1") as proc:
        await set_knobs(proc.url, tokens_per_chunk=2)
        async with WorkerClient(proc.url) as client:
            folded = await fold(client.generate(request("p q r s", request_id="s1")))
        assert folded.text(skip_special=True) == "p q r s"
        assert (await get_records(proc.url))["requests"] == ["s1"]


def test_taken_port_is_an_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        async def start() -> None:
            await SimWorker(port=port, transport="native").start()

        with pytest.raises(OSError, match="cannot listen"):
            asyncio.run(start())


# -- turnout's router in front --------------------------------------------------------------------


def test_router_end_to_end_over_the_native_transport() -> None:
    with run_router(sim_kwargs={"transport": "native"}) as router:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)
        text = "a reply of several tokens here"
        messages: Any = [{"role": "user", "content": text}]
        reply = client.chat.completions.create(model=MODEL, messages=messages)
        assert reply.choices[0].message.content == text
        pieces = [
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(model=MODEL, messages=messages, stream=True)
            if chunk.choices
        ]
        assert "".join(pieces) == text

        for sim in router.sims:
            sim.knobs.update({"delay_ms": 30.0})
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "word " * 60}],
            "stream": True,
        }
        with httpx.stream(
            "POST",
            f"{router.base_url}/v1/chat/completions",
            json=body,
            headers={"x-request-id": "leaves-1"},
            timeout=20,
        ) as response:
            next(line for line in response.iter_lines() if line.startswith("data: "))
        router.wait_until(lambda: any("leaves-1" in r for s in router.sims for r in s.aborted))
        router.wait_until(lambda: all(s.running == 0 for s in router.sims))


# -- smg (tonic / hyper) --------------------------------------------------------------------------


def _smg() -> str | None:
    venv = Path(sys.executable).parent / "smg"
    return str(venv) if venv.exists() else shutil.which("smg")


@pytest.mark.slow
def test_smg_streams_through_the_native_sim(tmp_path: Path) -> None:
    smg = _smg()
    if smg is None:
        pytest.skip("smg is not installed")
    with SimProcess("--transport", "native", "--tokens-per-chunk", "2", "--delay-ms", "2") as sim:
        port = free_port()
        argv = [
            smg,
            "launch",
            "--worker-urls",
            sim.url,
            "--tokenizer-path",
            str(demo_model.path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--prometheus-host",
            "127.0.0.1",
            "--prometheus-port",
            str(free_port()),
            "--log-level",
            "warn",
        ]
        log = (tmp_path / "smg.log").open("wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/readiness", timeout=1).status_code == 200:
                        break
                assert proc.poll() is None, (tmp_path / "smg.log").read_text()
                assert time.monotonic() < deadline, "smg did not become ready"
                time.sleep(0.2)
            client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0)
            model = client.models.list().data[0].id
            text = "one two three four five six seven"
            messages: Any = [{"role": "user", "content": text}]
            for _ in range(3):
                pieces = [
                    chunk.choices[0].delta.content or ""
                    for chunk in client.chat.completions.create(
                        model=model, messages=messages, stream=True
                    )
                    if chunk.choices
                ]
                assert text in "".join(pieces)
                reply = client.chat.completions.create(model=model, messages=messages)
                assert text in (reply.choices[0].message.content or "")
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
