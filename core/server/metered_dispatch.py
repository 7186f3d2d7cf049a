"""The step from generation to routing: each worker call of a request through the dispatcher,
with its bookkeeping (the request's log record, routing and retry metrics, the stream's meter,
a limited tenant's token reservation)."""

from __future__ import annotations

from collections.abc import Callable

from turnout.admission.context import current_ticket
from turnout.admission.preemption import open_admitted
from turnout.admission.ticket import token_work
from turnout.generation.pipeline import GenerateSession
from turnout.generation.prompt_size import PromptLimit
from turnout.observability.logs import RequestRecord, current_record
from turnout.observability.metrics import Metrics
from turnout.routing.dispatch import Dispatcher
from turnout.routing.types import RoutingRequest
from turnout.tenants import current_admission
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.workers.errors import WorkerRequestError

__all__ = ["MeteredDispatch"]


class MeteredDispatch:
    """Opens streams (the generation flow's ``Opener``: :meth:`open_stream`) and runs ``Embed``
    calls (the embeddings endpoint's ``Embedder``: :meth:`embed`) through ``dispatcher``, each
    within ``timeout`` seconds (None: no bound), booked into ``metrics`` and the request's log
    record. ``prompt_limit`` gives a model's context length (a tenant's reservation needs it).
    With admission by class (a ticket in the request's context), each call first waits for
    admission with its token work, and may be preempted before its first response."""

    __slots__ = ("_dispatcher", "_expected_output", "_metrics", "_prompt_limit", "_timeout")

    def __init__(
        self,
        dispatcher: Dispatcher,
        metrics: Metrics,
        timeout: float | None,
        prompt_limit: Callable[[str], PromptLimit | None],
        expected_output: int = 256,
    ) -> None:
        self._dispatcher = dispatcher
        self._expected_output = expected_output
        self._metrics = metrics
        self._timeout = timeout
        self._prompt_limit = prompt_limit

    async def open_stream(
        self,
        model: str,
        routing: RoutingRequest,
        request: pb.GenerateRequest,
        after: WorkerRequestError | None = None,
    ) -> GenerateSession:
        """Start ``request`` on a worker of ``model``: its session, metered (``after``: the
        failure it is sent again after, see ``Dispatcher.open_stream``)."""
        record = current_record()
        if record is not None:
            record.model = model
        # A limited tenant's tokens: reserved now that the prompt is tokenized (429 when they
        # do not fit), settled to the stream's usage when the request ends (all given back
        # when no worker took it: its usage stays unset).
        admission = current_admission()
        reservation = None
        if admission is not None:
            limit = self._prompt_limit(model)
            reservation = await admission.reserve_tokens(
                request, limit.context_length if limit is not None else None
            )
        # The attempts before ``after`` were counted when its session was opened.
        counted = after.attempts if after is not None else 1
        ticket = current_ticket()
        try:
            if ticket is None:
                session = await self._dispatcher.open_stream(
                    model, routing, request, self._timeout, after=after
                )
            else:
                session = await open_admitted(
                    ticket,
                    token_work(request, self._expected_output),
                    lambda: self._dispatcher.open_stream(
                        model, routing, request, self._timeout, after=after
                    ),
                )
        except WorkerRequestError as exc:
            self._failed(model, exc, record, counted)
            raise
        worker = session.worker.id
        self._routed(model, worker, session.attempts - counted)
        if record is not None:
            record.worker, record.attempts = worker, session.attempts
        # The pipeline feeds the meter from its walk over the responses.
        session.meter = meter = self._metrics.meter(model, record)
        if reservation is not None:
            reservation.usage = meter.usage
        if ticket is not None:
            ticket.usage = meter.usage
        return session

    async def embed(
        self, model: str, routing: RoutingRequest, request: pb.EmbedRequest
    ) -> pb.EmbedResponse:
        """The answer of a worker of ``model`` to ``request``, counted as streams are."""
        record = current_record()
        if record is not None:
            record.model = model
        # A limited tenant's input tokens: reserved before the call (429 when they do not
        # fit), given back when the call fails.
        admission = current_admission()
        reservation = None
        if admission is not None:
            reservation = await admission.reserve_input_tokens(len(request.tokenized.input_ids))
        ticket = current_ticket()
        if ticket is not None:
            await ticket.admit(len(request.tokenized.input_ids))
        try:
            answered = await self._dispatcher.embed(model, routing, request, self._timeout)
        except WorkerRequestError as exc:
            self._failed(model, exc, record, 1)
            raise
        response: pb.EmbedResponse = answered.response
        if reservation is not None:
            used = response.prompt_tokens or len(request.tokenized.input_ids)
            reservation.usage = lambda: used
        worker = answered.worker.id
        self._routed(model, worker, answered.attempts - 1)
        self._metrics.prompt_tokens.labels(model).inc(response.prompt_tokens)
        if record is not None:
            # A request of several inputs makes a call per input: its most attempts count.
            record.worker = worker
            record.attempts = max(record.attempts, answered.attempts)
            record.prompt_tokens += response.prompt_tokens
        return response

    def _routed(self, model: str, worker: str, retries: int) -> None:
        """A call that reached ``worker`` after ``retries`` more attempts."""
        metrics = self._metrics
        metrics.routed_of(model, worker).inc()
        if retries > 0:
            metrics.retries.labels(model).inc(retries)

    def _failed(
        self, model: str, exc: WorkerRequestError, record: RequestRecord | None, counted: int
    ) -> None:
        """A call that failed after ``exc.attempts`` attempts (the last on ``exc.worker_id``),
        ``counted`` of them counted before."""
        if exc.attempts > counted:
            self._metrics.retries.labels(model).inc(exc.attempts - counted)
        if record is not None:
            record.worker, record.attempts = exc.worker_id, exc.attempts
