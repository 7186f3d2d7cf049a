"""Prefill-decode dispatch over real simulated PD pairs (in process, real sockets): both legs
get the request with one rendezvous, the answer comes from decode, both legs always end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.pd import ChoicesSession, PairSession, draw_room
from turnout.routing.session import WorkerSession
from turnout.routing.types import Candidate, RoutingRequest
from turnout.sim import SimWorker
from turnout.wire import pb
from turnout.workers.errors import NoWorkerAvailable, WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.roles import Role
from turnout.workers.settings import WorkerSpec

from ..wire._helpers import chat_ids, request
from ._cands import Prefers
from .conftest import fast_settings

MODEL = "turnout-demo"
#: Rendezvous deadline of the sims (SGLang's is 300 s): generous, the machine may be busy.
BOOTSTRAP_S = 20.0


@dataclass
class Fleet:
    prefills: list[SimWorker]
    decodes: list[SimWorker]
    registry: WorkerRegistry
    dispatcher: Dispatcher

    @property
    def sims(self) -> list[SimWorker]:
        return [*self.prefills, *self.decodes]

    def outcome(self, rid: str) -> dict[str, str]:
        """How each sim that saw ``rid`` ended it."""
        return {s.url: s.records.outcomes[rid] for s in self.sims if rid in s.records.outcomes}

    async def all_ended(self) -> bool:
        """Every leg on every sim ended and every bootstrap room is free (within seconds)."""
        for _ in range(250):
            running = sum(len(s.servicer._running) for s in self.sims)
            rooms = sum(s.bootstrap.rooms_open for s in self.prefills if s.bootstrap)
            in_flight = sum(w.in_flight for w in self.registry.all())
            if running == rooms == in_flight == 0:
                return True
            await asyncio.sleep(0.02)
        return False


async def start_fleet(
    prefills: int = 1, decodes: int = 1, *, declare_roles: bool = True, **knobs: Any
) -> Fleet:
    knobs.setdefault("bootstrap_timeout_s", BOOTSTRAP_S)
    p_sims = [
        await SimWorker(port=0, role="prefill", bootstrap_port=0, **knobs).start()
        for _ in range(prefills)
    ]
    d_sims = [await SimWorker(port=0, role="decode", **knobs).start() for _ in range(decodes)]
    specs = [
        WorkerSpec(url=s.url, role=Role.PREFILL if declare_roles else None) for s in p_sims
    ] + [WorkerSpec(url=s.url, role=Role.DECODE if declare_roles else None) for s in d_sims]
    registry = WorkerRegistry(fast_settings(specs))
    await registry.start()
    for worker in registry.all():
        assert await registry.wait_ready(worker.id, 10)
    return Fleet(p_sims, d_sims, registry, Dispatcher(registry, default_policy=RoundRobinPolicy))


@pytest.fixture
async def fleet_of() -> AsyncIterator[Callable[..., Any]]:
    made: list[Fleet] = []

    async def make(*args: Any, **kwargs: Any) -> Fleet:
        fleet = await start_fleet(*args, **kwargs)
        made.append(fleet)
        return fleet

    yield make
    for fleet in made:
        await fleet.registry.stop()
        for sim in fleet.sims:
            await sim.stop()


def routing(text: str = "pairs") -> RoutingRequest:
    return RoutingRequest(MODEL, tuple(chat_ids(text)))


async def read_all(session: Any) -> list[pb.GenerateResponse]:
    async with session:
        return [r async for r in session]


async def test_a_pair_serves_the_request_and_both_legs_end(fleet_of) -> None:
    fleet = await fleet_of(declare_roles=False)  # roles and bootstrap port from server info
    prefill_worker = fleet.registry.get(fleet.prefills[0].url.removeprefix("grpc://"))
    assert prefill_worker.role is Role.PREFILL
    assert prefill_worker.bootstrap_port == fleet.prefills[0].bootstrap_port
    assert MODEL in fleet.registry.disaggregated
    req = request("tell me about pairs", request_id="pd-a", max_new_tokens=12)
    session = await fleet.dispatcher.open_stream(MODEL, routing(), req, timeout=30)
    assert isinstance(session, PairSession)
    assert session.worker.role is Role.DECODE
    assert session.prefill_worker is prefill_worker
    responses = await read_all(session)
    tokens = [t for r in responses if r.HasField("chunk") for t in r.chunk.token_ids]
    assert len(tokens) > 1  # the whole answer, from decode (prefill sends one token)
    assert responses[-1].complete.finish_reason in ("stop", "length")
    sent = [r for s in fleet.sims for r in s.requests if r.request_id == "pd-a"]
    assert len(sent) == 2
    params = {(r.disaggregated_params.bootstrap_host, r.disaggregated_params.bootstrap_port,
               r.disaggregated_params.bootstrap_room) for r in sent}  # fmt: skip
    assert params == {("127.0.0.1", fleet.prefills[0].bootstrap_port, session.room)}
    assert 0 <= session.room < 2**31
    assert await fleet.all_ended()
    assert fleet.outcome("pd-a") == {
        fleet.prefills[0].url: "length",
        fleet.decodes[0].url: responses[-1].complete.finish_reason,
    }


async def test_each_request_gets_its_own_room(fleet_of) -> None:
    fleet = await fleet_of()
    sessions = await asyncio.gather(
        *(
            fleet.dispatcher.open_stream(
                MODEL, routing(), request(f"q{i}", request_id=f"r{i}", max_new_tokens=4), 30
            )
            for i in range(12)
        )
    )
    await asyncio.gather(*(read_all(s) for s in sessions))
    rooms = {s.room for s in sessions}
    assert len(rooms) == 12
    assert await fleet.all_ended()


async def test_n_choices_go_to_one_pair_each(fleet_of) -> None:
    fleet = await fleet_of()
    req = request("pick a word", request_id="multi", max_new_tokens=6, n=3)
    session = await fleet.dispatcher.open_stream(MODEL, routing(), req, timeout=30)
    assert isinstance(session, ChoicesSession)
    responses = await read_all(session)
    completes = sorted(r.complete.index for r in responses if r.HasField("complete"))
    assert completes == [0, 1, 2]
    for sim in fleet.sims:
        ids = sorted(r.request_id for r in sim.requests)
        assert ids == ["multi-n0", "multi-n1", "multi-n2"]
        assert all(r.sampling_params.n == 1 for r in sim.requests)
    rooms = {r.disaggregated_params.bootstrap_room for r in fleet.decodes[0].requests}
    assert len(rooms) == 3
    assert await fleet.all_ended()


async def test_prompt_logprobs_come_from_prefill(fleet_of) -> None:
    fleet = await fleet_of()
    for stream in (True, False):
        req = request(
            "score it",
            request_id=f"lp-{stream}",
            stream=stream,
            return_logprob=True,
            prompt_logprobs_start=0,
            max_new_tokens=5,
        )
        responses = await read_all(
            await fleet.dispatcher.open_stream(MODEL, routing(), req, timeout=30)
        )
        head = getattr(responses[0], responses[0].WhichOneof("response"))
        assert head.HasField("input_logprobs")  # the decode sim never sends them
        assert list(head.input_logprobs.token_ids) == chat_ids("score it")
        assert head.HasField("output_logprobs")
    assert await fleet.all_ended()


async def test_closing_early_aborts_both_legs(fleet_of) -> None:
    fleet = await fleet_of(delay_ms=20)
    req = request("tell me a long story", request_id="early", max_new_tokens=200)
    session = await fleet.dispatcher.open_stream(MODEL, routing(), req, timeout=30)
    assert await session.next_batch()
    await session.aclose()
    assert await fleet.all_ended()
    await asyncio.sleep(0.2)  # the Abort call goes out in the background
    assert "early" in fleet.decodes[0].aborted
    assert fleet.outcome("early")[fleet.decodes[0].url] in ("abort", "cancelled")


async def test_a_cancelled_open_leaves_nothing_running(fleet_of) -> None:
    fleet = await fleet_of(ttft_ms=3000)
    req = request("slow prefill", request_id="gone", max_new_tokens=4)
    opening = asyncio.ensure_future(fleet.dispatcher.open_stream(MODEL, routing(), req, timeout=30))
    await asyncio.sleep(0.3)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert await fleet.all_ended()


@pytest.mark.parametrize("failing", ["prefill", "decode"])
async def test_a_failing_leg_retries_the_pair_without_its_worker(fleet_of, failing) -> None:
    """The failing role's policy would pick the failed worker again: only the dispatcher's
    exclusion keeps each request's retry off it."""
    fleet = await fleet_of(2, 2)
    bad = fleet.prefills[0] if failing == "prefill" else fleet.decodes[0]
    bad.knobs.update({"fail_status": "UNAVAILABLE"})
    bad_id = bad.url.removeprefix("grpc://")
    role = Role(failing)
    dispatcher = Dispatcher(
        fleet.registry,
        default_policy=RoundRobinPolicy,
        role_policy=lambda model, r: Prefers(bad_id) if r is role else RoundRobinPolicy(),
    )
    for i in range(6):
        req = request(f"try {i}", request_id=f"t{i}", max_new_tokens=4)
        session = await dispatcher.open_stream(MODEL, routing(f"try {i}"), req, 30)
        used = session.prefill_worker.id if failing == "prefill" else session.worker.id
        assert used != bad_id
        await read_all(session)
        assert [r.request_id for r in bad.requests].count(f"t{i}") <= 1
    assert fleet.registry.get(bad_id).failures_total >= 1
    assert await fleet.all_ended()


async def test_decode_workers_are_offered_whole_not_per_rank(fleet_of) -> None:
    """A decode worker's own scheduler picks its rank (from the bootstrap room): its policy is
    offered, and told of, whole workers; prefill workers offer their ranks."""
    fleet = await fleet_of(1, 2, dp_size=2)
    seen: dict[Role, list[list[str]]] = {Role.PREFILL: [], Role.DECODE: []}
    told: dict[Role, list[list[str]]] = {Role.PREFILL: [], Role.DECODE: []}

    class Recording(RoundRobinPolicy):
        def __init__(self, role: Role) -> None:
            super().__init__()
            self.role = role

        def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
            seen[self.role].append([c.id for c in candidates])
            return super().select(request, candidates)

        def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
            told[self.role].append(list(worker_ids))

    dispatcher = Dispatcher(
        fleet.registry,
        default_policy=RoundRobinPolicy,
        role_policy=lambda model, role: Recording(role),
    )
    session = await dispatcher.open_stream(
        MODEL, routing(), request("ranks", request_id="whole", max_new_tokens=4), 30
    )
    await read_all(session)
    decode_ids = sorted(s.url.removeprefix("grpc://") for s in fleet.decodes)
    prefill_id = fleet.prefills[0].url.removeprefix("grpc://")
    assert seen[Role.DECODE]
    assert told[Role.DECODE]
    assert all(sorted(ids) == decode_ids for ids in seen[Role.DECODE] + told[Role.DECODE])
    assert seen[Role.PREFILL] == [[f"{prefill_id}@0", f"{prefill_id}@1"]]
    assert not session.worker.id.count("@")
    assert await fleet.all_ended()


async def test_client_errors_are_not_retried_nor_counted(fleet_of) -> None:
    fleet = await fleet_of(2, 2)
    for sim in fleet.prefills:
        sim.knobs.update({"fail_status": "INVALID_ARGUMENT"})
    with pytest.raises(WorkerRequestError) as info:
        await fleet.dispatcher.open_stream(
            MODEL, routing(), request("bad", request_id="bad", max_new_tokens=4), 30
        )
    assert info.value.status == 400
    assert sum(len(s.requests) for s in fleet.prefills) == 1
    assert all(w.breaker.consecutive_failures == 0 for w in fleet.registry.all())
    assert await fleet.all_ended()


async def test_a_silent_pair_is_given_up_at_the_first_response_deadline(fleet_of) -> None:
    fleet = await fleet_of()
    fleet.prefills[0].knobs.update({"hang": True})
    fleet.dispatcher.first_response_timeout = 0.5
    with pytest.raises(WorkerRequestError) as info:
        await fleet.dispatcher.open_stream(
            MODEL, routing(), request("hang", request_id="hung", max_new_tokens=4), 30
        )
    assert info.value.status == 504
    assert all(w.failures_total == 1 for w in fleet.registry.all())  # neither answered
    assert await fleet.all_ended()


async def test_no_pair_is_503_naming_what_is_missing(fleet_of) -> None:
    fleet = await fleet_of()
    decode = fleet.registry.get(fleet.decodes[0].url.removeprefix("grpc://"))
    fleet.registry.set_draining(decode.id, True)
    assert fleet.registry.readiness_problem(MODEL) == "no healthy decode worker"
    with pytest.raises(NoWorkerAvailable) as info:
        await fleet.dispatcher.open_stream(MODEL, routing(), request(request_id="x"), 30)
    assert "1 decode worker(s): 1 draining" in str(info.value)


class _Unsent:
    """A Generate call that never went out: it stays silent until closed."""

    finished = False

    async def next_batch(self) -> list[Any]:
        await asyncio.Event().wait()
        return []

    async def aclose(self) -> None:
        pass


async def test_a_router_that_forgets_the_prefill_leg_fails(
    fleet_of, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sims enforce the pairing: a decode leg whose prefill leg was never sent fails at
    its rendezvous deadline, so the e2e tests would catch a router that forgets a leg."""
    fleet = await fleet_of(bootstrap_timeout_s=0.5)
    prefill = fleet.registry.get(fleet.prefills[0].url.removeprefix("grpc://"))
    monkeypatch.setattr(prefill.connection, "generate", lambda *args, **kw: _Unsent())
    with pytest.raises(WorkerRequestError) as info:
        await fleet.dispatcher.open_stream(
            MODEL, routing(), request(request_id="one-leg", max_new_tokens=4), 30
        )
    assert info.value.status >= 500
    assert not fleet.prefills[0].requests
    assert await fleet.all_ended()
    assert fleet.outcome("one-leg") == {fleet.decodes[0].url: "error"}


def test_rooms_are_non_negative_int32_and_follow_a_prefill_rank() -> None:
    import random

    rng = random.Random(1)
    rooms = [draw_room(rng) for _ in range(1000)]
    assert all(0 <= r < 2**31 for r in rooms)
    assert len(set(rooms)) == 1000
    ranked = [draw_room(rng, 3, 4) for _ in range(100)]
    assert all(r % 4 == 3 and 0 <= r < 2**31 for r in ranked)


async def test_regular_sessions_stay_regular(fleet_of) -> None:
    fleet = await fleet_of()
    sim = await SimWorker(port=0, served_model_name="plain").start()
    try:
        await fleet.registry.add(WorkerSpec(url=sim.url))
        assert await fleet.registry.wait_ready(sim.url.removeprefix("grpc://"), 10)
        session = await fleet.dispatcher.open_stream(
            "plain", RoutingRequest("plain"), request(request_id="reg", max_new_tokens=3), 30
        )
        assert isinstance(session, WorkerSession)
        await read_all(session)
        assert not sim.requests[0].HasField("disaggregated_params")
    finally:
        await sim.stop()


async def test_a_pair_waiting_on_a_worker_that_leaves_rotation_moves(fleet_of) -> None:
    """A hung decode worker is vetoed (as its event stream would have it: wedged or stopped)
    while a pair waits on it: the wait ends at once and the pair is retried without it."""
    fleet = await fleet_of(1, 2)
    bad = fleet.decodes[0]
    bad.knobs.update({"hang": True})
    bad_id = bad.url.removeprefix("grpc://")
    dispatcher = Dispatcher(
        fleet.registry,
        default_policy=RoundRobinPolicy,
        role_policy=lambda model, r: Prefers(bad_id) if r is Role.DECODE else RoundRobinPolicy(),
    )
    req = request("veto", request_id="v1", max_new_tokens=4)
    opening = asyncio.ensure_future(dispatcher.open_stream(MODEL, routing("veto"), req, 30))
    for _ in range(250):
        if bad.requests:
            break
        await asyncio.sleep(0.02)
    worker = fleet.registry.get(bad_id)
    assert worker.veto("its engine has produced nothing for 3.0s")
    session = await asyncio.wait_for(opening, 5)
    assert session.worker.id != bad_id
    await read_all(session)
    assert "out of rotation" in (worker.last_error or "")
    worker.veto(None)
    assert await fleet.all_ended()
