"""A simulated prefill-decode pair (``--role prefill|decode``): both legs driven over gRPC, the
rendezvous over the prefill sim's real bootstrap port."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest

from turnout.sim import SimProcess, SimWorker, get_records
from turnout.wire import WorkerCallError, WorkerClient, pb

from ..wire._helpers import Folded, fold, request

#: Rendezvous deadline in the tests of a missing leg (SGLang's default is 300 s) …
DEADLINE_S = 1.0
#: … and in the others, where both legs come (generous: the machine may be busy).
GENEROUS_S = 30.0


@dataclass
class Pair:
    prefill: SimWorker
    decode: SimWorker
    prefill_client: WorkerClient
    decode_client: WorkerClient

    def short_deadline(self) -> None:
        for sim in (self.prefill, self.decode):
            sim.knobs.update({"bootstrap_timeout_s": DEADLINE_S})

    def params(self, room: int) -> pb.DisaggregatedParams:
        assert self.prefill.bootstrap_port
        return pb.DisaggregatedParams(
            bootstrap_host="127.0.0.1",
            bootstrap_port=self.prefill.bootstrap_port,
            bootstrap_room=room,
        )


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    knobs = {"bootstrap_timeout_s": GENEROUS_S}
    async with (
        SimWorker(port=0, role="prefill", bootstrap_port=0, **knobs) as prefill,
        SimWorker(port=0, role="decode", **knobs) as decode,
        WorkerClient(prefill.url) as prefill_client,
        WorkerClient(decode.url) as decode_client,
    ):
        yield Pair(prefill, decode, prefill_client, decode_client)


async def rooms_closed(prefill: SimWorker) -> bool:
    """Whether every room is freed within a few seconds (each leg leaves its room just after
    its last message went out, or once the other leg hung up)."""
    assert prefill.bootstrap is not None
    for _ in range(250):
        if prefill.bootstrap.rooms_open == 0:
            return True
        await asyncio.sleep(0.02)
    return False


def leg(
    params: pb.DisaggregatedParams, text: str = "tell me about pairs", **kw: object
) -> pb.GenerateRequest:
    req = request(text, **kw)  # type: ignore[arg-type]
    req.disaggregated_params.CopyFrom(params)
    return req


async def both(
    pair: Pair, prefill_req: pb.GenerateRequest, decode_req: pb.GenerateRequest
) -> tuple[Folded | BaseException, Folded | BaseException]:
    results = await asyncio.gather(
        fold(pair.prefill_client.generate(prefill_req)),
        fold(pair.decode_client.generate(decode_req)),
        return_exceptions=True,
    )
    return results[0], results[1]


async def test_matching_rooms_serve_the_request(pair: Pair) -> None:
    req = leg(pair.params(42), request_id="pd-1", max_new_tokens=12, prompt_logprobs_start=0)
    prefilled, decoded = await both(pair, req, req)
    assert isinstance(prefilled, Folded)
    assert isinstance(decoded, Folded)
    async with SimWorker(port=0) as regular, WorkerClient(regular.url) as client:
        plain = await fold(client.generate(request("tell me about pairs", max_new_tokens=12)))
    # The decode leg streams the whole answer; the prefill leg answers like SGLang's prefill
    # server: the first token, finish_reason "length", and the prompt's logprobs.
    assert decoded.tokens[0] == plain.tokens[0]
    assert decoded.completes[0].finish_reason == plain.completes[0].finish_reason
    assert prefilled.tokens[0] == plain.tokens[0][:1]
    assert prefilled.completes[0].finish_reason == "length"
    assert prefilled.completes[0].prompt_tokens == plain.completes[0].prompt_tokens
    assert prefilled.chunks[0][0].HasField("input_logprobs")
    assert not decoded.chunks[0][0].HasField("input_logprobs")
    assert pair.prefill.records.outcomes["pd-1"] == "length"
    assert pair.decode.records.outcomes["pd-1"] == "stop"
    assert await rooms_closed(pair.prefill)
    # The same room can be used again once the pair is done.
    again = leg(pair.params(42), request_id="pd-2", max_new_tokens=3)
    prefilled, decoded = await both(pair, again, again)
    assert isinstance(prefilled, Folded)
    assert isinstance(decoded, Folded)


async def test_the_decode_leg_may_come_first(pair: Pair) -> None:
    req = leg(pair.params(7), request_id="late-prefill", max_new_tokens=4)
    decoding = asyncio.ensure_future(fold(pair.decode_client.generate(req)))
    await asyncio.sleep(0.2)
    assert not decoding.done()  # it waits for the prefill leg
    prefilled = await fold(pair.prefill_client.generate(req))
    decoded = await decoding
    assert len(decoded.tokens[0]) == 4
    assert len(prefilled.tokens[0]) == 1


async def test_a_missing_prefill_leg_fails_the_decode_at_the_deadline(pair: Pair) -> None:
    pair.short_deadline()
    started = time.monotonic()
    with pytest.raises(WorkerCallError) as info:
        await fold(pair.decode_client.generate(leg(pair.params(9), request_id="alone")))
    waited = time.monotonic() - started
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert "bootstrap_room 9" in info.value.message
    assert DEADLINE_S * 0.9 <= waited < DEADLINE_S + 10
    assert pair.decode.records.outcomes["alone"] == "error"


async def test_a_missing_decode_leg_fails_the_prefill_at_the_deadline(pair: Pair) -> None:
    pair.short_deadline()
    started = time.monotonic()
    with pytest.raises(WorkerCallError) as info:
        await fold(pair.prefill_client.generate(leg(pair.params(10), request_id="alone")))
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert "no decode server joined" in info.value.message
    assert time.monotonic() - started >= DEADLINE_S * 0.9


async def test_mismatched_rooms_fail_both_legs(pair: Pair) -> None:
    pair.short_deadline()
    prefilled, decoded = await both(
        pair,
        leg(pair.params(1), request_id="mismatch"),
        leg(pair.params(2), request_id="mismatch"),
    )
    for result in (prefilled, decoded):
        assert isinstance(result, WorkerCallError)
        assert result.code == grpc.StatusCode.INTERNAL
    assert await rooms_closed(pair.prefill)


async def test_legs_with_different_prompts_fail_the_decode(pair: Pair) -> None:
    prefilled, decoded = await both(
        pair,
        leg(pair.params(3), "one prompt", request_id="d1"),
        leg(pair.params(3), "another prompt", request_id="d1"),
    )
    assert isinstance(prefilled, Folded)
    assert isinstance(decoded, WorkerCallError)
    assert decoded.code == grpc.StatusCode.INTERNAL
    assert "different prompt" in decoded.message


async def test_pd_legs_need_disaggregated_params(pair: Pair) -> None:
    for client in (pair.prefill_client, pair.decode_client):
        with pytest.raises(WorkerCallError) as info:
            await fold(client.generate(request("no params", request_id="np")))
        assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "disaggregated_params" in info.value.message


async def test_decode_without_a_bootstrap_server_fails_at_once(pair: Pair) -> None:
    nowhere = pb.DisaggregatedParams(bootstrap_host="127.0.0.1", bootstrap_port=1, bootstrap_room=5)
    started = time.monotonic()
    with pytest.raises(WorkerCallError) as info:
        await fold(pair.decode_client.generate(leg(nowhere, request_id="nowhere")))
    assert info.value.code == grpc.StatusCode.INTERNAL
    assert "cannot reach the prefill bootstrap server" in info.value.message
    assert time.monotonic() - started < GENEROUS_S / 2


async def test_a_room_is_held_by_one_prefill_leg(pair: Pair) -> None:
    first = asyncio.ensure_future(
        fold(pair.prefill_client.generate(leg(pair.params(11), request_id="a")))
    )
    await asyncio.sleep(0.1)
    with pytest.raises(WorkerCallError) as info:
        await fold(pair.prefill_client.generate(leg(pair.params(11), request_id="b")))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "already in use" in info.value.message
    await fold(pair.decode_client.generate(leg(pair.params(11), request_id="a")))
    await first


async def test_pd_with_dp_ranks_follows_the_room() -> None:
    async with (
        SimWorker(port=0, role="prefill", bootstrap_port=0, dp_size=2) as prefill,
        SimWorker(port=0, role="decode", dp_size=2) as decode,
        WorkerClient(prefill.url) as pc,
        WorkerClient(decode.url) as dc,
    ):
        pair = Pair(prefill, decode, pc, dc)
        for room in (4, 5):
            req = leg(pair.params(room), request_id=f"room{room}", max_new_tokens=2)
            await both(pair, req, req)
        assert decode.records.ranks == {"room4": 0, "room5": 1}
        assert prefill.records.ranks == {"room4": 0, "room5": 1}
        info = await pc.get_server_info()
        assert info.server_args["disaggregation_mode"] == "prefill"
        assert info.server_args["disaggregation_bootstrap_port"] == prefill.bootstrap_port


async def test_subprocess_pair_meets_over_the_bootstrap_port() -> None:
    async with (
        SimProcess("--role", "prefill") as prefill,
        SimProcess("--role", "decode", "--bootstrap-timeout-s", "60") as decode,
        WorkerClient(prefill.url) as pc,
        WorkerClient(decode.url) as dc,
    ):
        assert prefill.bootstrap_port > 0
        params = pb.DisaggregatedParams(
            bootstrap_host="127.0.0.1", bootstrap_port=prefill.bootstrap_port, bootstrap_room=77
        )
        req = leg(params, request_id="proc", max_new_tokens=5)
        prefilled, decoded = await asyncio.gather(fold(pc.generate(req)), fold(dc.generate(req)))
        assert len(decoded.tokens[0]) == 5
        assert prefilled.completes[0].finish_reason == "length"
        records = await get_records(decode.url)
    assert records["role"] == "decode"
    assert records["outcomes"] == {"proc": "length"}
