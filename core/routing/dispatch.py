"""The dispatcher: pick a worker, start ``Generate`` (or call ``Embed``), retry worker faults
before the first response, and hand the pipeline a :class:`GenerateSession` (or the answer)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from math import inf
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar
from urllib.parse import urlsplit

from turnout.deadlines import Deadline, Deadlines
from turnout.routing.types import Candidate, Policy, RoutingRequest
from turnout.workers.connection import ResponseStream
from turnout.workers.dp import DpRank, Slot, candidate_ids
from turnout.workers.errors import NoWorkerAvailable, WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.retry import backoff_delay
from turnout.workers.roles import Role
from turnout.workers.settings import RetrySettings
from turnout.workers.worker import Worker, WorkerState

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from opentelemetry.util.types import AttributeValue

    from turnout.observability.otel import Tracing
    from turnout.routing.pd import PdSession

log = logging.getLogger(__name__)

PolicyFactory = Callable[[], Policy]
#: Makes the policy of one role (prefill or decode) of one model.
RolePolicyFactory = Callable[[str, Role], Policy]
DoneHook = Callable[[RoutingRequest, str, bool], None]
ChangedHook = Callable[[Sequence[str]], None]
#: gRPC metadata of a call (the W3C trace context).
Metadata = Sequence[tuple[str, str]]
T = TypeVar("T")
#: One attempt on a worker: (worker, the request's remaining seconds, the deadline of the wait
#: for the first answer, metadata) -> what the worker answered; raises what the worker's call
#: raised.
_Start = Callable[[Worker, float | None, Deadline, Metadata], Awaitable[T]]


@dataclass(slots=True)
class _Route:
    """A model's policy with its optional hooks looked up once."""

    policy: Policy
    done: DoneHook | None
    changed: ChangedHook | None

    @classmethod
    def of(cls, policy: Policy) -> _Route:
        return cls(
            policy,
            getattr(policy, "on_request_done", None),
            getattr(policy, "on_workers_changed", None),
        )


@dataclass(slots=True)
class _Won(Generic[T]):
    """The attempt that succeeded: its result, and the slot and span it still holds."""

    result: T
    slot: Slot
    route: _Route
    attempts: int
    span: Span | None


@dataclass(frozen=True, slots=True)
class Answered:
    """A unary call's answer, and where it came from."""

    response: Any
    worker: Worker
    #: Attempts it took (1 = no retry).
    attempts: int


class _Unanswered(Exception):
    """An attempt that ended without an answer, as the failure to record."""

    def __init__(self, failure: WorkerRequestError) -> None:
        super().__init__(failure.detail)
        self.failure = failure


class Dispatcher:
    """Routes ``Generate`` calls over a :class:`WorkerRegistry`.

    ``policies`` maps model id -> policy instance; ``default_policy`` serves other models and
    is either an instance (shared) or a zero-argument factory (one instance per model, the
    right choice for stateful policies such as ``cache_aware``). :meth:`set_policies` swaps
    them at run time (config reload). With ``tracing``, each worker selection and each attempt
    is a span, and the attempt's span is the parent of the worker's (W3C context as metadata).

    Models served by prefill and decode workers (the registry's ``disaggregated`` models) are
    routed to pairs (:mod:`turnout.routing.pd`), each role with its own policy from
    ``role_policy(model, role)`` (default: a policy as for regular workers).
    """

    def __init__(
        self,
        registry: WorkerRegistry,
        policies: Mapping[str, Policy] | None = None,
        default_policy: Policy | PolicyFactory | None = None,
        retry: RetrySettings | None = None,
        rng: random.Random | None = None,
        *,
        tracing: Tracing | None = None,
        role_policy: RolePolicyFactory | None = None,
    ) -> None:
        from turnout.routing.pd import PrefillDecode

        self.registry = registry
        self.tracing = tracing
        self.retry = retry or registry.settings.retry
        #: Seconds a worker may take to send a request's first response (None: no bound).
        self.first_response_timeout = registry.settings.wire.first_response_timeout_s or None
        #: The waits for first responses, on one loop timer (a timer per request costs more).
        self._first_responses = Deadlines()
        self._rng = rng or random.Random()
        self._routes: dict[str, _Route] = {}
        self._role_routes: dict[tuple[str, Role], _Route] = {}
        self._role_policy: RolePolicyFactory | None = None
        self._default: Policy | PolicyFactory = _round_robin
        self._disaggregated = registry.disaggregated
        self._pd = PrefillDecode(self, self._rng)
        self.set_policies(policies or {}, default_policy, role_policy)
        registry.add_listener(self._on_membership)

    # -- policies -------------------------------------------------------------------------------

    def set_policies(
        self,
        policies: Mapping[str, Policy],
        default_policy: Policy | PolicyFactory | None = None,
        role_policy: RolePolicyFactory | None = None,
    ) -> None:
        """Replace every policy (in-flight requests keep the worker they have)."""
        routes = {model: _Route.of(policy) for model, policy in policies.items()}
        self._default = default_policy if default_policy is not None else _round_robin
        self._routes = routes
        self._role_policy = role_policy
        self._role_routes = {}
        for model in self.registry.models():
            self._inform(self._route(model), model)

    def policy_for(self, model: str) -> Policy:
        """The policy that serves ``model``."""
        return self._route(model).policy

    def role_policy_for(self, model: str, role: Role) -> Policy:
        """The policy that picks ``model``'s workers of ``role`` (prefill or decode)."""
        return self._role_route(model, role).policy

    def _route(self, model: str) -> _Route:
        route = self._routes.get(model)
        if route is None:
            route = self._routes[model] = _Route.of(self._default_policy())
            self._inform(route, model)
        return route

    def _default_policy(self) -> Policy:
        default = self._default
        # A class is a factory too (a class has a ``select`` attribute: check it first).
        is_instance = not isinstance(default, type) and isinstance(default, Policy)
        return default if is_instance else default()  # type: ignore[return-value,operator]

    def _role_route(self, model: str, role: Role) -> _Route:
        route = self._role_routes.get((model, role))
        if route is None:
            factory = self._role_policy
            policy = factory(model, role) if factory is not None else self._default_policy()
            route = self._role_routes[(model, role)] = _Route.of(policy)
            if route.changed is not None:
                route.changed(_role_ids(self.registry.role_workers(model, role), role))
        return route

    def _inform(self, route: _Route, model: str) -> None:
        if route.changed is not None:
            route.changed(candidate_ids(self.registry.role_workers(model, Role.REGULAR)))

    def _on_membership(self, model: str, workers: list[Worker]) -> None:
        route = self._routes.get(model)
        if route is not None and route.changed is not None:
            route.changed(candidate_ids(w for w in workers if w.role is Role.REGULAR))
        for role in (Role.PREFILL, Role.DECODE):
            route = self._role_routes.get((model, role))
            if route is not None and route.changed is not None:
                route.changed(_role_ids([w for w in workers if w.role is role], role))

    # -- dispatch -------------------------------------------------------------------------------

    async def open_stream(
        self,
        model: str,
        routing: RoutingRequest,
        request: Any,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline handed to the gRPC call
    ) -> GenerateSession | PdSession:
        """Start ``request`` on a worker of ``model`` and wait for its first response.

        Worker faults before the first response, a first response later than
        ``wire.first_response_timeout_s`` included, are recorded, backed off and retried on
        workers not yet tried, up to ``retry.max_attempts`` attempts in all. Raises
        :class:`NoWorkerAvailable` (503) when no worker can take it, or
        :class:`WorkerRequestError` with the worker's status (a client error, or the last
        fault once retries are exhausted). ``timeout`` bounds the whole request.

        A disaggregated model's request goes to a prefill-decode pair the same way (see
        :mod:`turnout.routing.pd`), or to a regular worker of the model while no pair can.
        """
        if model in self._disaggregated and (
            self._pd.pair_possible(model) or not self.registry.candidates(model)
        ):
            loop = asyncio.get_running_loop()
            deadline_at = None if timeout is None else loop.time() + timeout
            return await self._pd.open(model, routing, request, deadline_at)

        async def first_batch(
            worker: Worker, remaining: float | None, first_wait: Deadline, metadata: Metadata
        ) -> tuple[ResponseStream, list[Any]]:
            stream = worker.connection.generate(request, remaining, metadata)
            try:
                with first_wait:
                    first = await stream.next_batch()
                if not first:
                    raise _Unanswered(
                        WorkerRequestError(
                            "the worker ended the request without answering",
                            status=502,
                            worker_fault=True,
                            retryable=True,
                            detail=f"{worker.url}: Generate ended without a response",
                        )
                    )
            except BaseException:
                # A timeout cancelled the read: closing tells the worker to abort it.
                await stream.aclose()
                raise
            return stream, first

        won = await self._attempt(model, routing, request, timeout, "Generate", first_batch)
        stream, first = won.result
        return GenerateSession(
            self, won.slot, stream, first, won.route, routing, won.attempts, won.span
        )

    async def embed(
        self,
        model: str,
        routing: RoutingRequest,
        request: Any,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline handed to the gRPC call
    ) -> Answered:
        """The ``Embed`` call of ``request`` on a worker of ``model``: its answer.

        Selection, retries, back-off, breakers and ``wire.first_response_timeout_s`` (here the
        wait for the answer) as for :meth:`open_stream`; the worker counts as in flight for
        the call's duration only.
        """

        async def answer(
            worker: Worker, remaining: float | None, first_wait: Deadline, metadata: Metadata
        ) -> Any:
            with first_wait:
                return await worker.connection.embed(request, remaining, metadata)

        won = await self._attempt(model, routing, request, timeout, "Embed", answer)
        _succeeded(won.slot, won.route, routing, won.span)
        return Answered(won.result, won.slot.worker, won.attempts)

    async def _attempt(  # noqa: PLR0917 - the dispatch entry points' arguments, passed on
        self,
        model: str,
        routing: RoutingRequest,
        request: Any,
        timeout: float | None,  # noqa: ASYNC109 - a deadline handed to the gRPC call
        rpc: str,
        start: _Start[T],
    ) -> _Won[T]:
        """Run ``start`` on selected workers until one succeeds (see :meth:`open_stream`).

        The winner's slot stays acquired and its span open: the caller owns them.
        """
        loop = asyncio.get_running_loop()
        deadline_at = None if timeout is None else loop.time() + timeout
        route = self._route(model)
        retry = self.retry
        max_attempts = retry.max_attempts if retry.enabled else 1
        first_timeout = self.first_response_timeout
        tracing = self.tracing
        tried: set[str] = set()
        refused_by: set[str] = set()
        attempt = 0
        adapter = routing.adapter
        default_lora_id = getattr(request, "lora_id", "")
        while True:
            candidates = self.registry.candidates(model, tried, adapter)
            if not candidates:
                raise self._no_worker(model, tried, adapter)
            if tracing is None:
                slot = self._select(route, routing, candidates)
            else:
                slot = _traced_select(self, tracing, route, routing, candidates)
            worker = slot.worker
            attempt += 1
            remaining = None if deadline_at is None else max(deadline_at - loop.time(), 0.001)
            wait = remaining if first_timeout is None else min(remaining or inf, first_timeout)
            slot.acquire()
            slot.pin(request)
            if adapter is not None:
                worker.pin_adapter(request, adapter, default_lora_id)
            span: Span | None = None
            metadata: Metadata = ()
            if tracing is not None:
                attributes = _attempt_attributes(slot, attempt, rpc)
                span = tracing.start_span(_span_name(rpc), attributes, client=True)
                metadata = tracing.worker_metadata(span)
            wait_until = inf if wait is None else loop.time() + wait
            first_wait = self._first_responses.at(wait_until, loop)
            try:
                result = await start(worker, remaining, first_wait, metadata)
            except asyncio.CancelledError:
                slot.release()
                if span is not None:
                    _end_span(span, None, cancelled=True)
                raise
            except TimeoutError as error:
                failure = _silent(worker, wait or 0.0, rpc)
                exc: BaseException = error
            except _Unanswered as error:
                failure = error.failure
                exc = RuntimeError(failure.detail)
            except Exception as error:
                classified = worker.connection.classify(error)
                if classified is None:
                    slot.release()
                    if tracing is not None and span is not None:
                        span.record_exception(error)
                        tracing.end(span, f"{type(error).__name__}: {error}")
                    raise
                failure, exc = classified, error
                del classified  # a local holding the error: a cycle through its traceback
            else:
                worker.health.traffic_ok()
                return _Won(result, slot, route, attempt, span)

            # The attempt failed before the client saw anything.
            slot.release()
            _record_failure(worker, failure)
            if route.done is not None:
                _call_hook(route.done, routing, slot.id, False)
            if failure.refused and worker.id not in refused_by:
                # Nothing ran (a graceful GOAWAY): send it again at once, as gRPC's transparent
                # retry does; the same worker may take it on a new connection. Once per worker,
                # and not counted against the retry budget.
                refused_by.add(worker.id)
                if span is not None:
                    _end_span(span, failure, resent=True)
                log.info(
                    "worker %s refused attempt %d, sending it again: %s",
                    worker.id,
                    attempt,
                    failure.detail,
                )
                del failure, exc  # an error kept in a local: a cycle through its traceback
                continue
            tried.add(worker.id)
            last_try = attempt - len(refused_by) >= max_attempts or not failure.retryable
            if not last_try:
                delay = backoff_delay(retry, attempt - 1, self._rng)
                out_of_time = deadline_at is not None and loop.time() + delay >= deadline_at
                last_try = out_of_time or not self.registry.candidates(model, tried, adapter)
            _log_failure(worker, failure, attempt, retrying=not last_try)
            if span is not None:
                _end_span(span, failure, exc=exc, retrying=not last_try)
            if not last_try:
                del failure, exc
                await asyncio.sleep(delay)
                continue
            if attempt > 1:
                failure.message = f"{failure.message} (after {attempt} attempts)"
            try:
                raise failure.on(worker.id, attempt) from exc
            finally:
                del failure, exc  # no reference cycle through this frame (see next_batch)

    def _select(self, route: _Route, routing: RoutingRequest, candidates: list[Slot]) -> Slot:
        try:
            chosen: Candidate = route.policy.select(routing, candidates)
        except Exception:
            log.exception("policy %s failed; using the least-loaded worker", route.policy)
            return min(candidates, key=lambda w: w.load)
        if isinstance(chosen, (Worker, DpRank)):
            return chosen
        for slot in candidates:  # a policy may return a wrapper; match it by id
            if slot.id == chosen.id:
                return slot
        log.error("policy %s chose a non-candidate %r", route.policy, chosen.id)
        return min(candidates, key=lambda w: w.load)

    def _no_worker(
        self, model: str, tried: set[str], adapter: str | None = None
    ) -> NoWorkerAvailable:
        workers = self.registry.role_workers(model, Role.REGULAR)
        if not workers:
            known = self.registry.models()
            return NoWorkerAvailable(
                model,
                f"no worker serves this model (served: {', '.join(known) or 'none'})",
            )
        states: dict[str, int] = {}
        for w in workers:
            if adapter is not None and not w.has_adapter(adapter):
                label = f"without LoRA adapter {adapter!r}"
            elif w.id in tried:
                label = "failed for this request"
            elif w.state is WorkerState.READY and not w.breaker.allows():
                label = "circuit open"
            else:
                label = w.state.value
            states[label] = states.get(label, 0) + 1
        summary = ", ".join(f"{n} {label}" for label, n in sorted(states.items()))
        return NoWorkerAvailable(model, f"{len(workers)} worker(s): {summary}")


class ClosingSession:
    """A session usable as ``async with``: leaving the block calls :meth:`aclose`."""

    __slots__ = ()

    async def aclose(self) -> None:
        """Stop the session and release what it holds."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class GenerateSession(ClosingSession):
    """The responses of one request on one worker (the first ones included).

    Read it batch by batch (:meth:`next_batch`: every response that arrived together) or
    response by response (``async for``). Counts as in flight on ``worker`` until it ends or
    :meth:`aclose` is called; records the outcome into the worker's circuit breaker. Errors
    after the first response raise :class:`WorkerRequestError` (they are not retried: the client
    has seen output).
    """

    #: How a failure after the first response is logged.
    _failed_note = "mid-stream (not retried: the client has output)"

    __slots__ = (
        "_dispatcher",
        "_done",
        "_health",
        "_pending",
        "_route",
        "_routing",
        "_span",
        "_stream",
        "attempts",
        "meter",
        "slot",
        "worker",
    )

    def __init__(  # noqa: PLR0917 - built only by Dispatcher.open_stream
        self,
        dispatcher: Dispatcher,
        slot: Slot,
        stream: ResponseStream,
        first: list[Any],
        route: _Route,
        routing: RoutingRequest,
        attempts: int,
        span: Span | None = None,
    ) -> None:
        self._dispatcher = dispatcher
        #: The attempt's span (tracing on): it lasts as long as the worker's call.
        self._span = span
        #: Where the request runs: the worker, or one of its DP ranks.
        self.slot = slot
        self.worker = slot.worker
        self._stream = stream
        #: Responses received but not handed out yet (the first batch, to begin with); None
        #: once handed out, so that a waiting stream keeps no container of its own.
        self._pending: list[Any] | None = first
        self._route = route
        #: What the policy's done hook is told (only kept for one).
        self._routing = routing if route.done is not None else None
        self._done = False
        #: Attempts it took to get the first response (1 = no retry).
        self.attempts = attempts
        #: What observes this stream for the request (its metrics), set by whoever opened it;
        #: the generation pipeline feeds it as it reads the responses.
        self.meter: Any = None
        self._health = self.worker.health
        if stream.finished:
            self._finish(None)

    @property
    def done(self) -> bool:
        """True once the stream ended, failed or was closed."""
        return self._done

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        pending = self._pending
        if not pending:
            pending = self._pending = await self.next_batch()
            if not pending:
                raise StopAsyncIteration
        return pending.pop(0)  # a batch is short

    async def next_batch(self) -> list[Any]:
        """The responses not handed out yet, waiting for some if there are none; an empty
        list once the stream ended."""
        pending = self._pending
        if pending is not None:
            self._pending = None
            if pending:
                return pending
        if self._done:
            return []
        # The worker's read is awaited here, not in a helper coroutine: one coroutine fewer
        # per stream step.
        try:
            batch = await self._stream.next_batch()
        except asyncio.CancelledError:
            # Cancelled while waiting on the worker (client gone, request timeout): that says
            # nothing good about the worker, so it is not booked as a success.
            if not self._done:
                self._finish(None, neutral=True)
                await self._stream.aclose()
            raise
        except Exception as exc:
            failure = self.worker.connection.classify(exc)
            if failure is None:
                self._finish(None)
                raise
            self._finish(failure)
            log.warning(
                "worker %s failed %s: %s", self.worker.id, self._failed_note, failure.detail
            )
            try:
                raise failure.on(self.worker.id, self.attempts) from exc
            finally:
                # The frame outlives the coroutine in the error's traceback: a local holding the
                # error would make a reference cycle of them.
                del failure
        if not batch:
            self._finish(None)
            return batch
        self._health.traffic_ok()
        if self._stream.finished:
            # Every choice completed: the worker is done even if nobody reads the stream's end.
            self._finish(None)
        return batch

    async def aclose(self) -> None:
        """Stop: cancel the gRPC call (the worker aborts the request) and release the worker."""
        if not self._done:
            self._finish(None)
            await self._stream.aclose()

    def _finish(self, failure: WorkerRequestError | None, *, neutral: bool = False) -> None:
        if self._done:
            return
        self._done = True
        worker = self.worker
        self.slot.release()
        if failure is not None:
            _record_failure(worker, failure)
        elif not neutral:
            worker.breaker.record_success()
        if self._route.done is not None and self._routing is not None:
            _call_hook(self._route.done, self._routing, self.slot.id, failure is None)
        if self._span is not None:
            _end_span(self._span, failure, cancelled=neutral)

    def __del__(self) -> None:
        # Safety net: a session dropped without aclose() must not stay "in flight" forever.
        if not self._done:
            self._done = True
            self.slot.release()
            if self._span is not None:
                _end_span(self._span, None, cancelled=True)


_SERVICE = "sglang.grpc.scheduler.SglangScheduler"
#: Most candidate ids listed on a selection span (the count is always there).
_MAX_LISTED_CANDIDATES = 32


def _traced_select(
    dispatcher: Dispatcher,
    tracing: Tracing,
    route: _Route,
    routing: RoutingRequest,
    candidates: list[Slot],
) -> Slot:
    """``Dispatcher._select`` in a span naming the policy, the candidates and the choice."""
    span = tracing.start_span(
        "select worker",
        {
            "turnout.policy": type(route.policy).__name__,
            "turnout.candidates": [slot.id for slot in candidates[:_MAX_LISTED_CANDIDATES]],
            "turnout.candidates.count": len(candidates),
        },
    )
    try:
        slot = dispatcher._select(route, routing, candidates)
    except BaseException as exc:
        tracing.end(span, f"{type(exc).__name__}: {exc}")
        raise
    tracing.end(span, attributes={"turnout.worker.id": slot.id, "turnout.worker.load": slot.load})
    return slot


def _span_name(rpc: str) -> str:
    """The span name of a call (``package.Service/Method``, as gRPC spans are named)."""
    return f"{_SERVICE}/{rpc}"


def _attempt_attributes(slot: Slot, attempt: int, rpc: str) -> dict[str, AttributeValue]:
    address = urlsplit(slot.url)
    attributes: dict[str, AttributeValue] = {
        "rpc.system": "grpc",
        "rpc.service": _SERVICE,
        "rpc.method": rpc,
        "server.address": address.hostname or "",
        "turnout.worker.id": slot.id,
        "turnout.attempt": attempt,
        "turnout.retry": attempt > 1,
    }
    if address.port is not None:
        attributes["server.port"] = address.port
    return attributes


def _end_span(
    span: Span,
    failure: WorkerRequestError | None,
    *,
    exc: BaseException | None = None,
    retrying: bool = False,
    resent: bool = False,
    cancelled: bool = False,
) -> None:
    """End an attempt's span: its outcome, and whether another attempt follows."""
    from opentelemetry.trace import Status, StatusCode

    if span.is_recording():
        if cancelled:
            span.set_attribute("turnout.outcome", "cancelled")
        elif failure is None:
            span.set_attribute("turnout.outcome", "ok")
        else:
            code = getattr(exc, "code", None)
            span.set_attributes(
                {
                    "turnout.outcome": "refused" if resent else "failed",
                    "turnout.status": failure.status,
                    "turnout.worker_fault": failure.worker_fault,
                    "turnout.retrying": retrying or resent,
                    "error.type": getattr(code, "name", None) or type(exc or failure).__name__,
                }
            )
            if code is not None and hasattr(code, "value"):
                span.set_attribute("rpc.grpc.status_code", code.value[0])
            span.set_status(Status(StatusCode.ERROR, failure.detail))
    span.end()


def _silent(worker: Worker, waited: float, rpc: str) -> WorkerRequestError:
    """A worker that did not send a first response in time: hung, stopped or overloaded."""
    return WorkerRequestError(
        f"the worker did not start answering within {waited:g}s",
        status=504,
        worker_fault=True,
        retryable=True,
        detail=f"{worker.url}: no response to {rpc} within {waited:g}s (aborted)",
    )


def _succeeded(slot: Slot, route: _Route, routing: RoutingRequest, span: Span | None) -> None:
    """A request that ended well on ``slot``: released, booked as a success."""
    slot.release()
    slot.worker.breaker.record_success()
    if route.done is not None:
        _call_hook(route.done, routing, slot.id, True)
    if span is not None:
        _end_span(span, None)


def _log_failure(
    worker: Worker, failure: WorkerRequestError, attempt: int, *, retrying: bool
) -> None:
    """One line per failed attempt, with the worker's address (the client is not told it)."""
    level = logging.WARNING if failure.worker_fault else logging.INFO
    log.log(
        level,
        "worker %s failed attempt %d (%s): %s",
        worker.id,
        attempt,
        "retrying on another worker" if retrying else "giving up",
        failure.detail,
    )


def _record_failure(worker: Worker, failure: WorkerRequestError) -> None:
    worker.last_error = failure.detail
    if failure.worker_fault:
        worker.failures_total += 1
        worker.breaker.record_failure()
        worker.health.traffic_fault()
        worker.wake.set()  # probe it now rather than at the next interval


def _call_hook(hook: DoneHook, routing: RoutingRequest, worker_id: str, ok: bool) -> None:
    try:
        hook(routing, worker_id, ok)
    except Exception:
        log.exception("policy on_request_done hook failed")


def _role_ids(workers: Sequence[Worker], role: Role) -> list[str]:
    """Candidate ids of ``role``'s workers: prefill workers offer their DP ranks, decode workers
    are offered whole (the bootstrap room picks their rank)."""
    if role is Role.DECODE:
        return [w.id for w in workers]
    return candidate_ids(workers)


def _round_robin() -> Policy:
    from turnout.plugins.policies.simple import RoundRobinPolicy

    return RoundRobinPolicy()
