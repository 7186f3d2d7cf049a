"""The dispatcher's unary path (``Embed``) over real gRPC test workers: the same selection,
retries, breakers and first-response timeout as Generate, the worker in flight only while the
call runs."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import grpc
import pytest

from tests.support import eventually
from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Answered, Dispatcher
from turnout.routing.types import RoutingRequest
from turnout.wire import pb
from turnout.workers.breaker import CircuitState
from turnout.workers.errors import NoWorkerAvailable, WorkerRequestError
from turnout.workers.settings import RetrySettings, WireSettings

from ._worker import TestWorker

ROUTING = RoutingRequest(model="m", token_ids=(1, 2, 3))


def embed_request(rid: str = "e", ids: tuple[int, ...] = (1, 2, 3)) -> pb.EmbedRequest:
    return pb.EmbedRequest(request_id=rid, tokenized=pb.TokenizedInput(input_ids=list(ids)))


def served_by(answer: Answered) -> int:
    """The port of the test worker that answered (its vector's second component)."""
    port = int(answer.response.embedding[1])
    assert answer.worker.url.endswith(f":{port}")
    return port


async def test_embed_is_routed_by_the_policy_and_books_success(workers, registry_for) -> None:
    fleet = await workers(3)
    registry = await registry_for(fleet)
    done: list[tuple[str, bool]] = []

    class Recording(RoundRobinPolicy):
        def on_request_done(self, request: RoutingRequest, worker_id: str, ok: bool) -> None:
            done.append((worker_id, ok))

    dispatcher = Dispatcher(registry, default_policy=Recording)
    answers = [
        await dispatcher.embed("m", ROUTING, embed_request(f"e{i}", (1,) * (i + 1)), timeout=5)
        for i in range(9)
    ]
    assert [a.response.prompt_tokens for a in answers] == list(range(1, 10))
    assert {a.attempts for a in answers} == {1}
    assert Counter(served_by(a) for a in answers) == {w.port: 3 for w in fleet}
    assert [w.embeds for w in fleet] == [3, 3, 3]
    assert Counter(ok for _, ok in done) == {True: 9}
    assert all(w.in_flight == 0 for w in registry.all())


async def test_worker_faults_are_retried_elsewhere_and_counted(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet)
    bad, good = fleet
    bad.fail_code = grpc.StatusCode.UNAVAILABLE
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    for i in range(4):
        answer = await dispatcher.embed("m", ROUTING, embed_request(f"x{i}"), timeout=5)
        assert served_by(answer) == good.port
        assert answer.attempts in (1, 2)
    assert bad.embeds >= 1
    assert good.embeds == 4
    bad_worker = registry.get(f"127.0.0.1:{bad.port}")
    assert bad_worker.failures_total == bad.embeds
    assert "UNAVAILABLE" in (bad_worker.last_error or "")


async def test_client_errors_are_neither_retried_nor_counted(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet)
    for w in fleet:
        w.fail_code = grpc.StatusCode.INVALID_ARGUMENT
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    for i in range(6):
        with pytest.raises(WorkerRequestError) as err:
            await dispatcher.embed("m", ROUTING, embed_request(f"c{i}"), timeout=5)
        assert err.value.status == 400
        assert err.value.attempts == 1
        assert "injected INVALID_ARGUMENT" in err.value.message
    assert sum(w.embeds for w in fleet) == 6
    for worker in registry.all():
        assert worker.breaker.state is CircuitState.CLOSED
        assert worker.failures_total == 0


async def test_all_failing_gives_up_after_max_attempts(workers, registry_for) -> None:
    fleet = await workers(3)
    registry = await registry_for(fleet, retry=RetrySettings(max_attempts=2, initial_backoff_ms=1))
    for w in fleet:
        w.fail_code = grpc.StatusCode.INTERNAL
    with pytest.raises(WorkerRequestError) as err:
        await Dispatcher(registry, default_policy=RoundRobinPolicy).embed(
            "m", ROUTING, embed_request(), timeout=5
        )
    assert (err.value.status, err.value.attempts) == (500, 2)
    assert "after 2 attempts" in err.value.message
    assert sum(w.embeds for w in fleet) == 2


async def test_a_silent_worker_times_out_is_aborted_and_retried(workers, registry_for) -> None:
    fleet = await workers(2)
    registry = await registry_for(fleet, wire=WireSettings(first_response_timeout_s=0.3))
    hung, good = fleet
    hung.embed_delay = 60.0
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    t0 = time.monotonic()
    for i in range(2):
        answer = await dispatcher.embed("m", ROUTING, embed_request(f"h{i}"), timeout=30)
        assert served_by(answer) == good.port
    assert time.monotonic() - t0 < 10  # a first-response timeout per try, not 30 s
    worker = registry.get(f"127.0.0.1:{hung.port}")
    assert hung.embeds >= 1
    assert worker.failures_total == hung.embeds
    assert "no response to Embed within 0.3s" in (worker.last_error or "")
    # The worker is told to stop what it sat on, and its call is cancelled.
    await eventually(lambda: len(set(hung.aborted)) == hung.embeds, within=3.0)
    await eventually(lambda: hung.active == 0, within=3.0)
    assert all(w.in_flight == 0 for w in registry.all())


async def test_in_flight_while_running_and_cancel_aborts(workers, registry_for) -> None:
    (slow,) = await workers(1)
    registry = await registry_for([slow])
    slow.embed_delay = 60.0
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    call = asyncio.ensure_future(dispatcher.embed("m", ROUTING, embed_request("gone"), timeout=30))
    (worker,) = registry.all()
    await eventually(lambda: slow.active == 1, within=3.0)
    assert worker.in_flight == 1
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert worker.in_flight == 0
    await eventually(lambda: slow.aborted == ["gone"], within=3.0)
    await eventually(lambda: slow.active == 0, within=3.0)
    # A cancelled call says nothing about the worker.
    assert worker.failures_total == 0
    assert worker.breaker.consecutive_failures == 0


async def test_no_worker_for_the_model(registry_for) -> None:
    late = TestWorker()
    registry = await registry_for([late], wait=False)
    with pytest.raises(NoWorkerAvailable) as err:
        await Dispatcher(registry, default_policy=RoundRobinPolicy).embed(
            "m", ROUTING, embed_request(), timeout=5
        )
    assert err.value.status == 503
