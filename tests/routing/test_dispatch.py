"""Dispatcher and registry over real gRPC test workers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc
import pytest

from tests.support import eventually
from turnout.plugins.policies.load import LeastLoadPolicy
from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.types import RoutingRequest
from turnout.workers.breaker import CircuitState
from turnout.workers.errors import NoWorkerAvailable, WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import RetrySettings, WireSettings, WorkerSpec
from turnout.workers.worker import WorkerState

from ._worker import TestWorker, make_request

ROUTING = RoutingRequest(model="m", token_ids=(1, 2, 3))


async def run_one(dispatcher: Dispatcher, model: str = "m", rid: str = "r") -> tuple[str, int]:
    session = await dispatcher.open_stream(model, ROUTING, make_request(rid), timeout=5)
    async with session:
        count = 0
        async for _ in session:
            count += 1
    return session.worker.id, count


async def test_round_robin_over_real_workers(workers, registry_for) -> None:
    fleet = await workers(3)
    registry = await registry_for(fleet)
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    results = [await run_one(dispatcher, rid=f"r{i}") for i in range(30)]
    assert all(count == 4 for _, count in results)  # 3 chunks + complete
    assert Counter(w for w, _ in results) == {w.id: 10 for w in registry.all()}
    # A worker counts an answer after its last message went out: wait for the counters.
    await eventually(lambda: [w.served for w in fleet] == [10, 10, 10], within=2.0)
    assert all(w.in_flight == 0 for w in registry.all())
    assert registry.models() == ["m"]
    assert registry.has_ready_worker("m")


@pytest.mark.parametrize("n", [2, 3])
async def test_one_pick_per_request_exact_sequence(workers, registry_for, n: int) -> None:
    fleet = await workers(n)
    registry = await registry_for(fleet)
    ids = [w.id for w in registry.workers_for("m")]  # the candidates' order
    for policy in (RoundRobinPolicy, LeastLoadPolicy):
        dispatcher = Dispatcher(registry, default_policy=policy)
        picks = [(await run_one(dispatcher, rid=f"s{i}"))[0] for i in range(2 * n + 1)]
        assert picks == [ids[i % n] for i in range(2 * n + 1)], policy


async def test_starts_with_no_worker_up_and_picks_them_up_later(registry_for) -> None:
    late = TestWorker()
    registry = await registry_for([late], wait=False)
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    assert not registry.has_ready_worker("m")
    t0 = time.monotonic()
    with pytest.raises(NoWorkerAvailable) as err:
        await dispatcher.open_stream("m", ROUTING, make_request(), timeout=5)
    assert time.monotonic() - t0 < 0.2  # fails fast, no hang
    assert err.value.status == 503
    assert "no worker serves" in err.value.reason  # model not even discovered yet
    await late.start()
    try:
        assert await registry.wait_ready(registry.all()[0].id, 3.0)
        assert (await run_one(dispatcher))[1] == 4
        assert registry.all()[0].labels["sglang_version"] == "test"
    finally:
        await late.stop()


async def test_failure_before_first_response_is_retried_elsewhere(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet)
    bad, good = fleet
    bad.fail_code = grpc.StatusCode.UNAVAILABLE
    bad_id = f"127.0.0.1:{bad.port}"
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    for i in range(4):
        session = await dispatcher.open_stream("m", ROUTING, make_request(f"x{i}"), timeout=5)
        async with session:
            assert len([r async for r in session]) == 4
        assert session.worker.id != bad_id
    await eventually(lambda: good.served == 4, within=2.0)
    assert bad.generates >= 1
    assert registry.get(bad_id).failures_total == bad.generates


async def test_client_errors_never_open_a_breaker_and_are_not_retried(workers, registry_for):
    fleet = await workers(2)
    registry = await registry_for(fleet)
    for w in fleet:
        w.fail_code = grpc.StatusCode.INVALID_ARGUMENT
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    for i in range(25):
        with pytest.raises(WorkerRequestError) as err:
            await dispatcher.open_stream("m", ROUTING, make_request(f"c{i}"), timeout=5)
        assert err.value.status == 400
        assert not err.value.worker_fault
        assert err.value.attempts == 1
    assert sum(w.generates for w in fleet) == 25  # one attempt each
    for worker in registry.all():
        assert worker.breaker.state is CircuitState.CLOSED
        assert worker.breaker.consecutive_failures == 0
        assert worker.routable


async def test_all_workers_failing_gives_up_with_status(workers, registry_for) -> None:
    fleet = await workers(3)
    registry = await registry_for(fleet, retry=RetrySettings(max_attempts=2, initial_backoff_ms=1))
    for w in fleet:
        w.fail_code = grpc.StatusCode.INTERNAL
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    with pytest.raises(WorkerRequestError) as err:
        await dispatcher.open_stream("m", ROUTING, make_request(), timeout=5)
    assert err.value.status == 500
    assert err.value.worker_fault
    assert err.value.attempts == 2
    assert sum(w.generates for w in fleet) == 2


async def test_breaker_opens_then_recovers(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet)
    flaky = fleet[0]
    flaky_id = f"127.0.0.1:{flaky.port}"
    flaky.fail_code = grpc.StatusCode.INTERNAL  # healthy probes, failing requests
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    for i in range(12):
        await run_one(dispatcher, rid=f"b{i}")
    worker = registry.get(flaky_id)
    assert worker.breaker.state is CircuitState.OPEN
    assert not worker.routable
    attempts_when_open = flaky.generates
    for i in range(5):
        await run_one(dispatcher, rid=f"o{i}")
    assert flaky.generates == attempts_when_open  # open circuit: no traffic
    flaky.fail_code = None
    await asyncio.sleep(0.35)  # breaker timeout -> half-open admits traffic
    for i in range(6):
        await run_one(dispatcher, rid=f"h{i}")
    assert worker.breaker.state is CircuitState.CLOSED
    assert flaky.served > 0


async def test_stopped_worker_mid_traffic_then_restarted(workers, registry_for) -> None:
    fleet = await workers(3)
    registry = await registry_for(fleet)
    for w in fleet:
        w.chunk_delay = 0.005
    victim = fleet[1]
    victim_id = f"127.0.0.1:{victim.port}"
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)

    stopped_at: list[float] = []
    outcomes: list[tuple[float, str, int | None]] = []  # (start, worker, responses or None)

    async def client(tag: int, n: int) -> None:
        for i in range(n):
            start = time.monotonic()
            try:
                wid, count = await run_one(dispatcher, rid=f"s{tag}-{i}")
            except WorkerRequestError as exc:
                outcomes.append((start, exc.worker_id or "?", None))
            else:
                outcomes.append((start, wid, count))

    traffic = asyncio.gather(*(client(t, 15) for t in range(4)))
    await asyncio.sleep(0.05)
    stopped_at.append(time.monotonic())
    await victim.stop()
    await traffic
    assert len(outcomes) == 60
    after = [o for o in outcomes if o[0] > stopped_at[0] + 0.001]
    assert len(after) > 20
    assert all(count == 4 for _, _, count in after)  # new requests all succeed on the others
    # Only streams already running on the stopped worker could fail (they are never replayed).
    failed = [o for o in outcomes if o[2] is None]
    assert all(wid == victim_id and start <= stopped_at[0] for start, wid, _ in failed)
    worker = registry.get(victim_id)
    await eventually(lambda: worker.state is WorkerState.UNHEALTHY, 3)
    assert not worker.routable
    await victim.start()  # same port
    assert await registry.wait_ready(victim_id, 3.0)
    served_before = victim.served
    for i in range(9):
        await run_one(dispatcher, rid=f"back{i}")
    assert victim.served > served_before


async def test_mid_stream_failure_is_not_retried(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet)
    for w in fleet:
        w.fail_after_first = grpc.StatusCode.INTERNAL
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    session = await dispatcher.open_stream("m", ROUTING, make_request(), timeout=5)
    got = [await session.__anext__()]

    async def rest() -> None:
        got.extend([r async for r in session])

    with pytest.raises(WorkerRequestError) as err:
        await rest()
    assert len(got) == 1
    assert err.value.status == 500
    assert sum(w.generates for w in fleet) == 1
    assert session.worker.in_flight == 0
    assert session.worker.breaker.consecutive_failures == 1


async def test_aclose_cancels_and_aborts_on_worker(workers, registry_for) -> None:
    fleet = await workers(1)
    registry = await registry_for(fleet)
    fleet[0].chunks = 1000
    fleet[0].chunk_delay = 0.01
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    session = await dispatcher.open_stream("m", ROUTING, make_request("long"), timeout=30)
    assert session.worker.in_flight == 1
    await session.__anext__()
    await session.aclose()
    assert session.worker.in_flight == 0
    for _ in range(100):
        if fleet[0].active == 0 and fleet[0].aborted:
            break
        await asyncio.sleep(0.01)
    assert fleet[0].active == 0
    assert fleet[0].aborted == ["long"]
    assert session.worker.breaker.consecutive_failures == 0


async def test_busy_worker_with_slow_probe_stays_ready(workers, registry_for) -> None:
    fleet = await workers(1)
    registry = await registry_for(fleet)
    worker = registry.all()[0]
    fleet[0].health_delay = 1.0  # every probe times out (timeout 0.5 s)
    fleet[0].chunks = 40
    fleet[0].chunk_delay = 0.02
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    for i in range(2):  # ~0.8 s each: several probe intervals with real traffic flowing
        assert (await run_one(dispatcher, rid=f"busy{i}"))[1] == 41
        assert worker.state is WorkerState.READY
    # Without traffic the failing probes do take it out.
    await eventually(lambda: worker.state is WorkerState.UNHEALTHY, 4)


async def test_reported_load_steers_least_load(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet)
    fleet[0].reported_load = 50
    busy = registry.get(f"127.0.0.1:{fleet[0].port}")
    for _ in range(100):
        if busy.load == 50:
            break
        await asyncio.sleep(0.01)
    assert busy.load == 50
    dispatcher = Dispatcher(registry, default_policy=LeastLoadPolicy())
    for i in range(6):
        wid, _ = await run_one(dispatcher, rid=f"l{i}")
        assert wid != busy.id


async def test_multi_model_candidates_and_policy_swap(workers, registry_for) -> None:
    a = await workers(2, model="alpha")
    b = await workers(1, model="beta")
    registry = await registry_for([*a, *b])
    assert registry.models() == ["alpha", "beta"]
    assert len(registry.workers_for("alpha")) == 2
    dispatcher = Dispatcher(
        registry, policies={"alpha": RoundRobinPolicy()}, default_policy=RoundRobinPolicy
    )
    beta_id = f"127.0.0.1:{b[0].port}"
    for i in range(4):
        assert (await run_one(dispatcher, "alpha", f"a{i}"))[0] != beta_id
        assert (await run_one(dispatcher, "beta", f"b{i}"))[0] == beta_id
    with pytest.raises(NoWorkerAvailable, match="served: alpha, beta"):
        await dispatcher.open_stream("gamma", ROUTING, make_request(), timeout=5)
    least = LeastLoadPolicy()
    dispatcher.set_policies({"alpha": least})
    assert dispatcher.policy_for("alpha") is least
    assert isinstance(dispatcher.policy_for("beta"), RoundRobinPolicy)


async def test_config_model_wins_and_duplicates_rejected(workers) -> None:
    (w,) = await workers(1, model="reported")
    registry = WorkerRegistry(
        __import__("tests.routing.conftest", fromlist=["fast_settings"]).fast_settings(
            [WorkerSpec(url=w.url, model="configured", labels={"tier": "gold"})]
        )
    )
    await registry.start()
    try:
        worker = registry.all()[0]
        assert await registry.wait_ready(worker.id, 3)
        assert worker.model_id == "configured"
        assert worker.labels["served_model_name"] == "reported"
        assert worker.labels["tier"] == "gold"
        from turnout.workers.errors import WorkerConflict

        with pytest.raises(WorkerConflict):
            await registry.add(WorkerSpec(url=w.url, id="other"))
    finally:
        await registry.stop()
    assert all(t.done() for t in registry._tasks.values())


async def test_deadline_before_first_response_is_504_without_hanging(workers, registry_for):
    fleet = await workers(2)
    registry = await registry_for(fleet)
    for w in fleet:
        w.first_delay = 5.0
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    t0 = time.monotonic()
    with pytest.raises(WorkerRequestError) as err:
        await dispatcher.open_stream("m", ROUTING, make_request(), timeout=0.3)
    assert time.monotonic() - t0 < 1.0
    assert err.value.status == 504
    assert all(w.in_flight == 0 for w in registry.all())


async def test_policy_hears_membership_changes(workers, registry_for) -> None:
    from turnout.plugins.policies.hashing import ConsistentHashingPolicy

    fleet = await workers(3)
    registry = await registry_for(fleet[:2])
    policy = ConsistentHashingPolicy()
    dispatcher = Dispatcher(registry, policies={"m": policy}, default_policy=RoundRobinPolicy)
    assert policy._ring.members == {w.id for w in registry.all()}
    added = await registry.add(WorkerSpec(url=fleet[2].url), wait_s=3)
    assert added.routable
    assert added.id in policy._ring.members
    await registry.remove(added.id)
    assert added.id not in policy._ring.members
    assert registry.get(added.id) is None
    keyed = RoutingRequest(model="m", routing_key="user-1")
    first = await dispatcher.open_stream("m", keyed, make_request("k1"), timeout=5)
    await first.aclose()
    again = await dispatcher.open_stream("m", keyed, make_request("k2"), timeout=5)
    await again.aclose()
    assert first.worker.id == again.worker.id


def test_per_worker_overrides_apply() -> None:
    from turnout.workers.settings import BreakerOverride, HealthOverride
    from turnout.workers.worker import Worker

    from .conftest import fast_settings

    settings = fast_settings()
    spec = WorkerSpec(
        url="grpc://127.0.0.1:1",
        health=HealthOverride(interval_s=7.0),
        circuit_breaker=BreakerOverride(failure_threshold=1),
    )
    worker = Worker(spec, object(), settings.health, settings.circuit_breaker)  # type: ignore[arg-type]
    assert worker.id == "127.0.0.1:1"
    assert worker.health.settings.interval_s == 7.0
    assert worker.health.settings.timeout_s == settings.health.timeout_s
    worker.breaker.record_failure()
    assert worker.breaker.state is CircuitState.OPEN


async def test_session_released_once_every_choice_completed(workers, registry_for) -> None:
    fleet = await workers(1)
    registry = await registry_for(fleet)
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    session = await dispatcher.open_stream("m", ROUTING, make_request("done"), timeout=5)
    seen = []
    while True:
        response = await session.__anext__()
        seen.append(response)
        if response.HasField("complete"):
            break  # a pipeline may stop reading here, before the stream's end
    assert len(seen) == 4
    assert session.done
    assert session.worker.in_flight == 0
    assert [r async for r in session] == []
    await session.aclose()
    assert fleet[0].aborted == []  # a finished request is not aborted


async def test_health_checks_disabled_ready_after_discovery(workers, registry_for) -> None:
    from turnout.workers.settings import HealthSettings

    fleet = await workers(1)
    fleet[0].healthy = False  # would never pass a probe
    registry = await registry_for(fleet, health=HealthSettings(enabled=False))
    worker = registry.all()[0]
    assert worker.routable
    assert worker.model_id == "m"
    assert fleet[0].health_checks == 0
    assert (await run_one(Dispatcher(registry, default_policy=RoundRobinPolicy)))[1] == 4


async def test_hung_worker_times_out_is_aborted_and_retried(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet, wire=WireSettings(first_response_timeout_s=0.3))
    hung = fleet[0]
    hung.first_delay = 60.0  # accepts the call, never answers
    hung_id = f"127.0.0.1:{hung.port}"
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    for i in range(4):
        t0 = time.monotonic()
        session = await dispatcher.open_stream("m", ROUTING, make_request(f"h{i}"), timeout=30)
        async with session:
            assert len([r async for r in session]) == 4
        assert session.worker.id != hung_id
        assert time.monotonic() - t0 < 5  # one first-response timeout at most, not 30 s
    worker = registry.get(hung_id)
    tries = hung.generates
    assert tries >= 2
    assert worker.failures_total == tries
    assert worker.breaker.consecutive_failures == tries  # timeouts count against the breaker
    assert "no response to Generate within 0.3s" in (worker.last_error or "")
    # The worker was told to stop each request it sat on.
    await eventually(lambda: len(set(hung.aborted)) == tries, within=2.0)
    await eventually(lambda: hung.active == 0, within=2.0)
    assert all(w.in_flight == 0 for w in registry.all())


async def test_hung_worker_alone_gives_504_after_the_first_response_timeout(
    workers, registry_for
) -> None:
    (hung,) = await workers(1)
    registry = await registry_for([hung], wire=WireSettings(first_response_timeout_s=0.2))
    hung.first_delay = 60.0
    t0 = time.monotonic()
    with pytest.raises(WorkerRequestError) as err:
        await Dispatcher(registry, default_policy=RoundRobinPolicy).open_stream(
            "m", ROUTING, make_request("alone"), timeout=30
        )
    assert time.monotonic() - t0 < 3
    assert err.value.status == 504
    assert err.value.worker_fault
    assert "0.2s" in err.value.message
    assert str(hung.port) not in err.value.message  # no worker address for the client ...
    assert str(hung.port) in err.value.detail  # ... but the logs get it


async def test_breaker_opens_on_timeouts_and_half_open_takes_one_trial(
    workers, registry_for
) -> None:
    fleet = await workers(3)
    registry = await registry_for(fleet, wire=WireSettings(first_response_timeout_s=0.2))
    hung = fleet[0]
    hung.first_delay = 60.0
    hung_id = f"127.0.0.1:{hung.port}"
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    worker = registry.get(hung_id)
    for i in range(9):  # breaker threshold 3: every third request tries the hung worker
        await run_one(dispatcher, rid=f"t{i}")
        if worker.breaker.state is CircuitState.OPEN:
            break
    assert worker.breaker.state is CircuitState.OPEN
    tried = hung.generates
    assert tried == 3
    await asyncio.sleep(0.35)  # breaker timeout (0.3 s): half-open
    assert worker.routable
    results = await asyncio.gather(*(run_one(dispatcher, rid=f"p{i}") for i in range(9)))
    assert all(count == 4 for _, count in results)
    assert hung.generates == tried + 1  # one trial, not a third of the burst
    assert worker.breaker.state is CircuitState.OPEN


async def test_cancelled_wait_is_not_booked_as_a_success(workers, registry_for) -> None:
    fleet = await workers(1)
    registry = await registry_for(fleet)
    worker = registry.all()[0]
    worker.breaker.record_failure()
    worker.breaker.record_failure()
    fleet[0].chunk_delay = 5.0  # the first chunk comes, then the worker goes quiet
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    session = await dispatcher.open_stream("m", ROUTING, make_request("quiet"), timeout=30)
    await session.__anext__()

    async def read_rest() -> None:
        async for _ in session:
            pass

    reader = asyncio.create_task(read_rest())
    await asyncio.sleep(0.1)
    reader.cancel()  # e.g. the request timeout or the client leaving
    with pytest.raises(asyncio.CancelledError):
        await reader
    assert session.done
    assert worker.in_flight == 0
    assert worker.breaker.consecutive_failures == 2  # not reset by a "success"
    await eventually(lambda: fleet[0].aborted == ["quiet"], within=2.0)


async def test_worker_answering_unhealthy_leaves_rotation_despite_traffic(
    workers, registry_for
) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet)
    sick = fleet[0]
    sick_id = f"127.0.0.1:{sick.port}"
    worker = registry.get(sick_id)
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    stop = asyncio.Event()

    async def traffic() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            await run_one(dispatcher, rid=f"busy{i}")

    load = asyncio.gather(*(traffic() for _ in range(3)))
    try:
        await asyncio.sleep(0.3)
        served = sick.served
        sick.healthy = False  # still serves every request, but says it is unhealthy
        await eventually(lambda: worker.state is WorkerState.UNHEALTHY, within=5.0)
        assert sick.served > served  # it was serving traffic all along
        assert not worker.routable
        assert "healthy=false" in (worker.last_error or "")
    finally:
        stop.set()
        await load


async def test_served_models_follow_workers_joining_and_leaving(workers, registry_for) -> None:
    alpha, beta = await workers(2, model="alpha")
    beta.model = "beta"
    registry = await registry_for([alpha])
    assert registry.models() == ["alpha"]
    registry.models().append("not served")  # each caller gets a list of its own
    assert registry.models() == ["alpha"]
    joined = await registry.add(WorkerSpec(url=beta.url), wait_s=5)
    assert joined.model_id == "beta"
    assert registry.models() == ["alpha", "beta"]
    await registry.remove(registry.all()[0].id, drain_timeout_s=1)
    assert registry.models() == ["beta"]
