"""The dispatcher: pick a worker, start ``Generate`` (or call ``Embed``), retry worker faults
before the first response, and hand the pipeline a :class:`WorkerSession` (or the answer).

The parts: a model's policy as a :class:`~turnout.routing.route.Route`, the retry rule in
:class:`~turnout.routing.attempts.Attempts`, the session in :mod:`turnout.routing.session`, the
spans in :mod:`turnout.routing.spans`; prefill-decode pairs in :mod:`turnout.routing.pd`.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from math import inf
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from turnout.deadlines import Deadline, Deadlines
from turnout.routing.attempts import Attempts, no_first_response, out_of_rotation
from turnout.routing.pd import PdSession, PrefillDecode
from turnout.routing.route import Route
from turnout.routing.session import WorkerSession, record_failure
from turnout.routing.spans import end_attempt, start_attempt, start_http_attempt
from turnout.routing.types import Policy, RoutingRequest
from turnout.workers.connection import ResponseStream
from turnout.workers.dp import Slot, candidate_ids
from turnout.workers.errors import NoWorkerAvailable, WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.roles import Role
from turnout.workers.settings import RetrySettings
from turnout.workers.worker import Worker

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from turnout.observability.otel import Tracing

__all__ = ["Answered", "Dispatcher", "PolicyFactory", "RolePolicyFactory"]

log = logging.getLogger(__name__)

PolicyFactory = Callable[[], Policy]
#: Makes the policy of one role (prefill or decode) of one model.
RolePolicyFactory = Callable[[str, Role], Policy]
#: gRPC metadata of a call (the W3C trace context).
Metadata = Sequence[tuple[str, str]]
T = TypeVar("T")
#: One attempt on a worker: (worker, the request's remaining seconds, the deadline of the wait
#: for the first answer, metadata) -> what the worker answered; raises what the worker's call
#: raised.
_Start = Callable[[Worker, float | None, Deadline, Metadata], Awaitable[T]]


@dataclass(slots=True)
class _Won(Generic[T]):
    """The attempt that succeeded: its result, and the slot and span it still holds."""

    result: T
    slot: Slot
    route: Route
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
    right choice for stateful policies such as ``cache_aware``): whoever builds the dispatcher
    chooses it (the app from the config). :meth:`set_policies` swaps them at run time (config
    reload). With ``tracing``, each worker selection and each attempt is a span, and the
    attempt's span is the parent of the worker's (W3C context as metadata).

    Models served by prefill and decode workers (the registry's ``disaggregated`` models) are
    routed to pairs (:mod:`turnout.routing.pd`), each role with its own policy from
    ``role_policy(model, role)`` (default: a policy as for regular workers).
    """

    def __init__(
        self,
        registry: WorkerRegistry,
        policies: Mapping[str, Policy] | None = None,
        *,
        default_policy: Policy | PolicyFactory,
        retry: RetrySettings | None = None,
        rng: random.Random | None = None,
        tracing: Tracing | None = None,
        role_policy: RolePolicyFactory | None = None,
    ) -> None:
        self.registry = registry
        self.tracing = tracing
        self.retry = retry or registry.settings.retry
        #: Seconds a worker may take to send a request's first response (None: no bound).
        self.first_response_timeout = registry.settings.wire.first_response_timeout_s or None
        #: The waits for first responses, on one loop timer (a timer per request costs more).
        self._first_responses = Deadlines()
        self._rng = rng or random.Random()
        #: Narrows the candidates of a request to where it has a place now, before the policy
        #: chooses (admission's engine capacity); None: every candidate.
        self.placement: Callable[[list[Slot]], list[Slot]] | None = None
        self._routes: dict[str, Route] = {}
        self._role_routes: dict[tuple[str, Role], Route] = {}
        self._role_policy: RolePolicyFactory | None = None
        self._default: Policy | PolicyFactory = default_policy
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
        """Replace every policy (in-flight requests keep the worker they have); without a
        ``default_policy`` the current one stays."""
        routes = {model: Route(policy) for model, policy in policies.items()}
        if default_policy is not None:
            self._default = default_policy
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
        return self.role_route(model, role).policy

    def _route(self, model: str) -> Route:
        route = self._routes.get(model)
        if route is None:
            route = self._routes[model] = Route(self._default_policy())
            self._inform(route, model)
        return route

    def _default_policy(self) -> Policy:
        default = self._default
        # A class is a factory too (a class has a ``select`` attribute: check it first).
        is_instance = not isinstance(default, type) and isinstance(default, Policy)
        return default if is_instance else default()  # type: ignore[return-value,operator]

    def role_route(self, model: str, role: Role) -> Route:
        """The route that picks ``model``'s workers of ``role`` (made on first use)."""
        route = self._role_routes.get((model, role))
        if route is None:
            factory = self._role_policy
            policy = factory(model, role) if factory is not None else self._default_policy()
            route = self._role_routes[(model, role)] = Route(policy)
            route.workers_changed(_role_ids(self.registry.role_workers(model, role), role))
        return route

    def _inform(self, route: Route, model: str) -> None:
        route.workers_changed(candidate_ids(self.registry.role_workers(model, Role.REGULAR)))

    def _on_membership(self, model: str, workers: list[Worker]) -> None:
        route = self._routes.get(model)
        if route is not None:
            route.workers_changed(candidate_ids(w for w in workers if w.role is Role.REGULAR))
        for role in (Role.PREFILL, Role.DECODE):
            route = self._role_routes.get((model, role))
            if route is not None:
                route.workers_changed(_role_ids([w for w in workers if w.role is role], role))

    def attempts(self, deadline_at: float | None) -> Attempts:
        """The attempts of one request ending at ``deadline_at`` (loop time; None: never)."""
        return Attempts(self.retry, self._rng, deadline_at, self.first_response_timeout)

    # -- dispatch -------------------------------------------------------------------------------

    async def open_stream(
        self,
        model: str,
        routing: RoutingRequest,
        request: Any,
        timeout: float | None = None,  # noqa: ASYNC109 - a deadline handed to the gRPC call
        *,
        after: WorkerRequestError | None = None,
    ) -> WorkerSession | PdSession:
        """Start ``request`` on a worker of ``model`` and wait for its first response.

        Worker faults before the first response, a first response later than
        ``wire.first_response_timeout_s`` included, are recorded, backed off and retried on
        workers not yet tried, up to ``retry.max_attempts`` attempts in all. Raises
        :class:`NoWorkerAvailable` (503) when no worker can take it, or
        :class:`WorkerRequestError` with the worker's status (a client error, or the last
        fault once retries are exhausted). ``timeout`` bounds the whole request.

        ``after``: this request failed on a worker after its first response, but its client saw
        nothing of it (a one-shot answer): it goes on as after a failure before the first
        response (``after.attempts`` counted, that worker left out), or ``after`` is raised
        when no attempt may follow.

        A disaggregated model's request goes to a prefill-decode pair the same way (see
        :mod:`turnout.routing.pd`), or to a regular worker of the model while no pair can.
        """
        loop = asyncio.get_running_loop()
        deadline_at = None if timeout is None else loop.time() + timeout
        if model in self._disaggregated and (
            self._pd.pair_possible(model) or not self.registry.candidates(model)
        ):
            return await self._pd.open(model, routing, request, deadline_at, after)

        async def first_batch(
            worker: Worker, remaining: float | None, first_wait: Deadline, metadata: Metadata
        ) -> tuple[ResponseStream, list[Any]]:
            stream = worker.connection.generate(request, remaining, metadata)
            try:
                with first_wait:
                    first = await stream.next_batch()
                if not first:
                    raise _Unanswered(no_first_response(worker))
            except BaseException:
                # A timeout cancelled the read: closing tells the worker to abort it.
                await stream.aclose()
                raise
            return stream, first

        attempts = self.attempts(deadline_at)
        if after is not None:
            await attempts.resume(
                after,
                lambda: bool(self.registry.candidates(model, attempts.tried, routing.adapter)),
            )
        won = await self._attempt(model, routing, request, attempts, "Generate", first_batch)
        stream, first = won.result
        return WorkerSession(won.slot, stream, first, won.route, routing, won.attempts, won.span)

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

        loop = asyncio.get_running_loop()
        deadline_at = None if timeout is None else loop.time() + timeout
        attempts = self.attempts(deadline_at)
        won = await self._attempt(model, routing, request, attempts, "Embed", answer)
        _succeeded(won.slot, won.route, routing, won.span)
        return Answered(won.result, won.slot.worker, won.attempts)

    async def relay(
        self,
        model: str,
        routing: RoutingRequest,
        start: _Start[tuple[ResponseStream, list[Any]]],
        timeout: float | None = None,  # noqa: ASYNC109 - the request's deadline, passed on
        *,
        request: str = "POST",
    ) -> WorkerSession:
        """A forwarded request on one of ``model``'s HTTP workers (:mod:`turnout.http_workers`):
        ``start`` sends it to a selected worker and returns its answer's stream with what came
        first; ``request`` names it (``"POST /v1/chat/completions"``: its spans and errors).
        Selection, retries before the first response, back-off, breakers and spans as for
        :meth:`open_stream`."""
        loop = asyncio.get_running_loop()
        deadline_at = None if timeout is None else loop.time() + timeout
        attempts = self.attempts(deadline_at)
        won = await self._attempt(model, routing, None, attempts, request, start, http=True)
        stream, first = won.result
        return WorkerSession(won.slot, stream, first, won.route, routing, won.attempts, won.span)

    async def _attempt(  # noqa: PLR0917 - the dispatch entry points' arguments, passed on
        self,
        model: str,
        routing: RoutingRequest,
        request: Any,
        attempts: Attempts,
        rpc: str,
        start: _Start[T],
        *,
        http: bool = False,
    ) -> _Won[T]:
        """Run ``start`` on selected workers until one succeeds (see :meth:`open_stream`);
        among the model's HTTP workers with ``http`` (``request`` unused).

        The winner's slot stays acquired and its span open: the caller owns them.
        """
        loop = asyncio.get_running_loop()
        route = self._route(model)
        tracing = self.tracing
        adapter = routing.adapter
        # Each worker mints its own ids for an adapter: a retry starts from the given one.
        default_lora_id = getattr(request, "lora_id", "")
        while True:
            candidates = self.registry.candidates(model, attempts.tried, adapter, http=http)
            if not candidates:
                raise self._no_worker(model, attempts, adapter)
            placement = self.placement
            if placement is not None and len(candidates) > 1:
                candidates = placement(candidates)
            slot = route.select(routing, candidates, tracing)
            worker = slot.worker
            attempt = attempts.next()
            slot.acquire()
            if not http:
                slot.pin(request)
            if adapter is not None:
                worker.pin_adapter(request, adapter, default_lora_id)
            span: Span | None = None
            metadata: Metadata = ()
            if tracing is not None:
                span, metadata = (
                    start_http_attempt(tracing, slot, attempt.number, rpc)
                    if http
                    else start_attempt(tracing, slot, attempt.number, rpc)
                )
            wait = attempt.wait
            wait_until = inf if wait is None else loop.time() + wait
            first_wait = self._first_responses.at(wait_until, loop)
            # Cut short when the worker leaves rotation (wedged, stopped) meanwhile.
            waits = worker.first_waits
            waits[first_wait] = None
            try:
                result = await start(worker, attempt.remaining, first_wait, metadata)
            except asyncio.CancelledError:
                slot.release()
                if span is not None:
                    end_attempt(span, None, cancelled=True)
                raise
            except TimeoutError as error:
                vetoed = worker.vetoed
                failure = (
                    out_of_rotation(worker, vetoed, rpc)
                    if vetoed is not None
                    else no_first_response(worker, wait or 0.0, rpc)
                )
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
                return _Won(result, slot, route, attempt.number, span)
            finally:
                waits.pop(first_wait, None)

            # The attempt failed before the client saw anything.
            slot.release()
            record_failure(worker, failure)
            route.done(routing, slot.id, False)
            if failure.refused and attempts.resend([worker.id]):
                # Nothing ran (a graceful GOAWAY): send it again at once, as gRPC's transparent
                # retry does; the same worker may take it on a new connection.
                if span is not None:
                    end_attempt(span, failure, resent=True)
                log.info(
                    "worker %s refused attempt %d, sending it again: %s",
                    worker.id,
                    attempt.number,
                    failure.detail,
                )
                del failure, exc  # an error kept in a local: a cycle through its traceback
                continue
            delay = attempts.failed(
                [worker.id],
                failure.retryable,
                lambda: bool(self.registry.candidates(model, attempts.tried, adapter, http=http)),
            )
            _log_failure(worker, failure, attempt.number, retrying=delay is not None)
            if span is not None:
                end_attempt(span, failure, exc=exc, retrying=delay is not None)
            if delay is not None:
                del failure, exc
                await asyncio.sleep(delay)
                continue
            try:
                raise attempts.give_up(failure, worker.id) from exc
            finally:
                del failure, exc  # no reference cycle through this frame (see next_batch)

    def _no_worker(
        self, model: str, attempts: Attempts, adapter: str | None = None
    ) -> NoWorkerAvailable:
        workers = self.registry.role_workers(model, Role.REGULAR)
        if not workers:
            known = self.registry.models()
            return NoWorkerAvailable(
                model,
                f"no worker serves this model (served: {', '.join(known) or 'none'})",
            )
        summary = attempts.describe(workers, adapter)
        return NoWorkerAvailable(model, f"{len(workers)} worker(s): {summary}")


def _succeeded(slot: Slot, route: Route, routing: RoutingRequest, span: Span | None) -> None:
    """A request that ended well on ``slot``: released, booked as a success."""
    slot.release()
    slot.worker.breaker.record_success()
    route.done(routing, slot.id, True)
    if span is not None:
        end_attempt(span, None)


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


def _role_ids(workers: Sequence[Worker], role: Role) -> list[str]:
    """Candidate ids of ``role``'s workers: prefill workers offer their DP ranks, decode workers
    are offered whole (the bootstrap room picks their rank)."""
    if role is Role.DECODE:
        return [w.id for w in workers]
    return candidate_ids(workers)
