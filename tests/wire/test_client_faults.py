"""Every simulated fault mode, seen through the client's error type and status table."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from turnout.sim import SimWorker
from turnout.wire import ClientSettings, WorkerCallError, WorkerClient
from turnout.wire.transport import TransportName

from ._helpers import fold, request


@pytest.mark.parametrize(
    ("status", "http", "fault"),
    [
        ("UNAVAILABLE", 503, True),
        ("RESOURCE_EXHAUSTED", 429, True),
        ("INTERNAL", 500, True),
        ("INVALID_ARGUMENT", 400, False),
        ("UNIMPLEMENTED", 501, False),
    ],
)
async def test_fail_before_first_chunk(
    sim: SimWorker, client: WorkerClient, status: str, http: int, fault: bool
) -> None:
    sim.knobs.fail_status = status
    stream = client.generate(request("hi"))
    with pytest.raises(WorkerCallError) as info:
        await anext(stream)
    err = info.value
    assert err.code == grpc.StatusCode[status]
    assert err.http_status == http
    assert err.worker_fault is fault
    assert err.method == "Generate"
    assert err.worker == sim.url
    assert "simulated failure" in err.message
    assert stream.responses == 0  # nothing reached us: safe to retry elsewhere
    assert stream.finished


async def test_fail_after_n_tokens(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.fail_after_tokens = 5
    tokens: list[int] = []

    async def consume() -> None:
        async for response in client.generate(request("one two three four five six seven")):
            tokens.extend(response.chunk.token_ids)

    with pytest.raises(WorkerCallError) as info:
        await consume()
    assert len(tokens) == 5
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert info.value.worker_fault


async def test_fault_budget_limits_faults_to_the_next_requests(
    sim: SimWorker, client: WorkerClient
) -> None:
    sim.knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
    with pytest.raises(WorkerCallError):
        await fold(client.generate(request("hi", request_id="a")))
    out = await fold(client.generate(request("hi", request_id="b")))
    assert out.completes[0].finish_reason == "stop"


async def test_hang_until_the_client_gives_up(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.hang = True
    stream = client.generate(request("hi", request_id="hung"))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(stream), 0.2)
    assert sim.records.generated.get("hung", 0) == 0


async def test_unhealthy(sim: SimWorker, client: WorkerClient) -> None:
    assert (await client.health_check()).healthy
    sim.knobs.unhealthy = True
    answer = await client.health_check()
    assert not answer.healthy
    assert "unhealthy" in answer.message
    assert sim.records.health_checks == 2


async def test_refused_connections_then_recovery(sim: SimWorker, transport: TransportName) -> None:
    settings = ClientSettings(unary_timeout=2.0, max_reconnect_backoff_s=0.2, transport=transport)
    async with WorkerClient(sim.url, settings) as client:
        assert (await client.health_check()).healthy
        port = sim.port
        await sim.stop_serving()
        assert not sim.serving
        with pytest.raises(WorkerCallError) as info:
            await client.get_model_info()
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert info.value.http_status == 503
        assert info.value.worker_fault
        with pytest.raises(WorkerCallError) as gen_info:
            await fold(client.generate(request("hi")))
        assert gen_info.value.code == grpc.StatusCode.UNAVAILABLE
        await sim.resume_serving()
        assert sim.port == port
        # Same client, same channel: it reconnects on its own.
        for _ in range(50):
            try:
                out = await fold(client.generate(request("back again", request_id="after")))
                break
            except WorkerCallError:
                await asyncio.sleep(0.1)
        else:
            pytest.fail("client did not reconnect to the restarted worker")
        assert out.text(skip_special=True) == "back again"


async def test_stopping_the_server_mid_stream_is_a_worker_fault(
    sim: SimWorker, client: WorkerClient
) -> None:
    sim.knobs.delay_ms = 10
    stream = client.generate(request(" ".join(["w"] * 100), request_id="cut"))
    await anext(stream)
    await sim.stop_serving()
    with pytest.raises(WorkerCallError) as info:
        await fold(stream)
    assert info.value.worker_fault
    # The sim books the outcome when its handler sees the cancellation: give a loaded machine time.
    for _ in range(1000):
        if "cut" in sim.records.outcomes:
            break
        await asyncio.sleep(0.01)
    assert sim.records.outcomes["cut"] == "cancelled"


async def test_nothing_listening(unused_tcp_port: int, transport: TransportName) -> None:
    settings = ClientSettings(transport=transport)
    async with WorkerClient(f"grpc://127.0.0.1:{unused_tcp_port}", settings) as client:
        with pytest.raises(WorkerCallError) as info:
            await client.health_check(timeout_s=2.0)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(WorkerCallError):
            await client.wait_ready(0.2)


async def test_invalid_requests_are_client_errors(sim: SimWorker, client: WorkerClient) -> None:
    bad_token = request("hi", request_id="bad-token")
    bad_token.tokenized.input_ids.append(10**6)
    stop_strings = request("hi", request_id="stop-str", stop=["END"])
    no_input = request("hi", request_id="no-input")
    no_input.ClearField("tokenized")
    for req, words in (
        (bad_token, "out of range"),
        (stop_strings, "stop strings"),
        (no_input, "Tokenized input"),
    ):
        with pytest.raises(WorkerCallError) as info:
            await fold(client.generate(req))
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.http_status == 400
        assert not info.value.worker_fault
        assert words in info.value.message


async def test_duplicate_request_id_in_flight(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.delay_ms = 20
    first = client.generate(request("a b c d e f", request_id="same"))
    await anext(first)
    with pytest.raises(WorkerCallError) as info:
        await fold(client.generate(request("x", request_id="same")))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    await first.aclose()


async def test_closed_client_refuses_new_calls(sim: SimWorker, transport: TransportName) -> None:
    client = WorkerClient(sim.url, ClientSettings(transport=transport))
    assert (await client.health_check()).healthy
    await client.close()
    with pytest.raises(WorkerCallError, match="closed"):
        await client.health_check()
