"""The one request flow of every generation endpoint, as named stages.

1. **prepare** — the endpoint checks the request (before the model is looked up), the name
   becomes a model and its runtime (tokenizer, parsers), and the endpoint's prompt builder makes
   a :class:`~turnout.generation.plan.Plan`: prompts (token ids, text), sampling, output
   processing, worker flags; what the plan asks of the model is checked
   (:mod:`~turnout.generation.plan_checks`).
2. **build** — one ``GenerateRequest`` per prompt, and fresh choice processors per prompt.
3. **dispatch** — one worker session per prompt, all or none (the dispatcher selects the
   worker and retries faults before the first response). For a prefill-decode model the
   session is a pair: the same request on a prefill and a decode worker, read from decode
   (:mod:`turnout.routing.pd`; one pair per choice when ``n > 1``).
4. **events** — each session's responses become batches of events, prompt after prompt
   (:class:`~turnout.generation.pipeline.SessionEvents`).
5. **render** — the endpoint's :class:`Renderer` turns each batch into stream payloads, or
   folds it into one answer: streaming and one-shot answers read the very same events.

An endpoint is an :class:`Endpoint`: a request type, a check, a prompt builder and a renderer.
The HTTP side decodes the body, runs :func:`run_endpoint` and sends what it returns.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from turnout.generation.choice import ChoiceProcessor, TokenPiece
from turnout.generation.context import RequestContext
from turnout.generation.events import Event
from turnout.generation.migration import Migration
from turnout.generation.models import ModelRuntime, ModelTable, UnknownAdapter
from turnout.generation.output import make_processors, token_piece
from turnout.generation.pipeline import GenerateSession, Opener, SessionEvents
from turnout.generation.plan import Plan, Prompt
from turnout.generation.plan_checks import check_plan
from turnout.generation.spans import RequestSpans, traced_prepare
from turnout.generation.worker_request import worker_requests, worker_streaming
from turnout.routing.types import RoutingRequest
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.workers.errors import WorkerRequestError

if TYPE_CHECKING:
    from turnout.observability.otel import Tracing


class Renderer(Protocol):
    """Turns the event batches of one request into an API's answer.

    Streaming calls :meth:`opening` before each prompt's events, :meth:`stream` per batch,
    :meth:`complete` and :meth:`closing` at the end; a one-shot answer calls :meth:`fold` per
    batch, then :meth:`complete` and :meth:`answer`. Batches hold the events of worker
    responses that arrived together.
    """

    def opening(self, prompt_index: int) -> list[Any]:
        """Payloads sent before the first events of prompt ``prompt_index`` (with them)."""
        ...

    def stream(self, events: list[Event]) -> list[Any]:
        """Payloads for one batch of events."""
        ...

    def closing(self) -> list[Any]:
        """Payloads sent after the last batch."""
        ...

    async def complete(self) -> None:
        """Called once every batch went through (streamed or folded), before :meth:`closing`
        or :meth:`answer`: an endpoint that keeps its answers (the Responses API's store)
        keeps it here, so that it is kept before the client reads the end of the answer."""
        ...

    def fold(self, events: list[Event]) -> None:
        """Take one batch of events into the one-shot answer."""
        ...

    def answer(self) -> Any:
        """The one-shot answer's body (once every batch was folded)."""
        ...


class GenerationRequest(Protocol):
    """What the flow reads of any endpoint's request."""

    @property
    def model(self) -> str | None:
        """The requested model name (``None``: the default)."""
        ...


R = TypeVar("R", bound=GenerationRequest)


@dataclass(frozen=True, slots=True)
class Endpoint(Generic[R]):
    """A generation API on the one flow."""

    #: The request body's type (decoding validates it).
    request_type: type[R]
    #: Refuses what the endpoint cannot serve (400s), before the model is looked up.
    check: Callable[[R], None]
    #: The prompt builder.
    prompts: Callable[[R, ModelRuntime, RequestContext], Awaitable[Plan]]
    #: A fresh renderer for one request.
    renderer: Callable[[R, Plan, RequestContext], Renderer]
    #: What the endpoint answers (API docs).
    description: str = ""
    #: Its stream is OpenAI's typed events (each payload names its event in ``type``), as the
    #: Responses API sends them; else ``data:`` lines ending with ``[DONE]``.
    typed_events: bool = False
    #: Answers requests the one flow alone cannot (the Responses API's MCP tools: several
    #: generations in one answer), or returns None for the one flow to answer.
    runner: Callable[[R, RequestContext, Backend], Awaitable[Generated | None]] | None = None


class Backend(Protocol):
    """What the flow needs of the router: models, and streams on workers."""

    @property
    def models(self) -> ModelTable:
        """Model names → runtimes."""
        ...

    @property
    def open_stream(self) -> Opener:
        """Starts a request on a worker of a model."""
        ...

    @property
    def tracing(self) -> Tracing | None:
        """Stage spans are opened with it; None while tracing is off."""
        ...


@dataclass(frozen=True, slots=True)
class Folded:
    """A one-shot answer: the body to send as JSON."""

    body: Any


class PayloadStream(Protocol):
    """A streamed answer's lists of payloads (each to be sent in one piece), as an async
    iterator that is closed once the sender is done with it (also when it stopped early)."""

    def __aiter__(self) -> AsyncIterator[list[Any]]:
        """The iterator itself."""
        ...

    def __anext__(self) -> Awaitable[list[Any]]:
        """The next list of payloads (``StopAsyncIteration`` at the end)."""
        ...

    async def aclose(self) -> None:
        """Stop: close every worker session still open (which aborts its request)."""
        ...


@dataclass(frozen=True, slots=True)
class Streamed:
    """A streamed answer: lists of payloads, each list to be sent in one piece."""

    payloads: PayloadStream
    #: The payloads are typed events (see :attr:`Endpoint.typed_events`).
    typed_events: bool = False


Generated = Folded | Streamed


async def run_endpoint(
    endpoint: Endpoint[R], request: R, ctx: RequestContext, backend: Backend
) -> Generated:
    """Answer one generation request: the stages of the module's docstring, in order."""
    if endpoint.runner is not None:
        generated = await endpoint.runner(request, ctx, backend)
        if generated is not None:
            return generated
    tracing = backend.tracing
    if tracing is None:
        plan = await prepare(endpoint, request, ctx, backend.models)
    else:
        plan = await traced_prepare(tracing, prepare(endpoint, request, ctx, backend.models))
    return await run_plan(endpoint, request, plan, ctx, backend)


async def run_plan(
    endpoint: Endpoint[R], request: R, plan: Plan, ctx: RequestContext, backend: Backend
) -> Generated:
    """The stages after **prepare**, on the plan :func:`prepare` made for ``request`` (a
    background response is prepared when it is submitted and runs later)."""
    tracing = backend.tracing
    work = build(plan, ctx)
    renderer = endpoint.renderer(request, plan, ctx)
    sessions = await dispatch(backend.open_stream, plan, work.requests, ctx)
    # A backend without the setting does not migrate answers.
    moves = int(getattr(backend, "migration_attempts", 0))
    migrations = _migrations(backend.open_stream, plan, work, ctx, moves)
    sources = _sources(work, sessions, migrations)
    if tracing is not None:  # time to first token and the stream, as spans
        spans = RequestSpans(tracing, ctx)
        for migration in migrations or ():
            migration.on_move = spans.migrated
        if plan.stream:
            payloads = spans.payloads(_Payloads(spans.renderer(renderer), sources))
            return Streamed(payloads, endpoint.typed_events)
        answer = _one_shot(
            _Retry(endpoint, request, ctx, backend.open_stream, plan, spans.renderer, moves),
            spans.renderer(renderer),
            sources,
            sessions,
        )
        return Folded(await spans.folded(answer))
    if plan.stream:
        return Streamed(_Payloads(renderer, sources), endpoint.typed_events)
    retry = _Retry(endpoint, request, ctx, backend.open_stream, plan, None, moves)
    return Folded(await _one_shot(retry, renderer, sources, sessions))


async def prepare(
    endpoint: Endpoint[R], request: R, ctx: RequestContext, models: ModelTable
) -> Plan:
    """Check, model, prompts: the endpoint's plan for ``request``."""
    endpoint.check(request)
    lora_path = getattr(request, "lora_path", None)
    try:
        model_id, adapter = models.resolve_model(request.model, lora_path)
    except UnknownAdapter:  # loaded at run time elsewhere? ask the workers before the 404
        model_id, adapter = await models.resolve_model_fresh(request.model, lora_path)
    runtime = await models.runtime(model_id)
    plan = await endpoint.prompts(request, runtime, ctx)
    check_plan(plan)
    if adapter is not None:
        plan.adapter = adapter
        plan.lora_id = models.lora_id(model_id, adapter)
    return plan


async def model_runtime(models: ModelTable, requested: str | None) -> ModelRuntime:
    """The runtime of the model a request names (the errors of ``ModelTable.resolve_name``);
    every endpoint resolves its model this way, generation or not."""
    return await models.runtime(models.resolve_name(requested))


@dataclass(frozen=True, slots=True)
class Work:
    """What the dispatch and events stages need of a plan, built once per request."""

    #: One per prompt.
    requests: list[pb.GenerateRequest]
    #: The choice processors of each prompt.
    processors: list[list[ChoiceProcessor]]
    #: The workers are asked for a stream (else for one message per choice).
    worker_streams: bool
    #: The prompts' logprobs are read: their tokens' text, and how many alternatives.
    prompt_logprobs: tuple[TokenPiece, int] | None = None


def build(plan: Plan, ctx: RequestContext) -> Work:
    """The worker requests and fresh choice processors of every prompt."""
    worker_streams, interval = worker_streaming(plan.stream, plan.output.has_stops)
    requests = worker_requests(
        plan,
        plan.request_id or ctx.worker_request_id,
        worker_streams=worker_streams,
        stream_interval=interval,
    )
    processors = [
        make_processors(plan.runtime, plan.output, first_index=k * plan.n)
        for k in range(len(plan.prompts))
    ]
    prompt_logprobs = None
    if plan.prompt_logprobs is not None:
        prompt_logprobs = (token_piece(plan.runtime, plan.output), plan.prompt_logprobs)
    return Work(requests, processors, worker_streams, prompt_logprobs)


async def dispatch(
    open_stream: Opener,
    plan: Plan,
    requests: Sequence[pb.GenerateRequest],
    ctx: RequestContext,
    after: WorkerRequestError | None = None,
) -> list[GenerateSession]:
    """Open one worker session per prompt, one after another; when one cannot be opened, those
    already open are closed (which aborts them on their workers) before the error goes on.
    ``after``: the failure they start over after (see :class:`Opener`)."""
    sessions: list[GenerateSession] = []
    try:
        for prompt, request in zip(plan.prompts, requests, strict=True):
            routing = _routing(plan, prompt, ctx)
            opened = (  # ``after`` only when there is one: an opener may not take it
                await open_stream(plan.model_id, routing, request)
                if after is None
                else await open_stream(plan.model_id, routing, request, after)
            )
            sessions.append(opened)
    except BaseException:
        await _close(sessions)
        raise
    return sessions


def _routing(plan: Plan, prompt: Prompt, ctx: RequestContext) -> RoutingRequest:
    """What the dispatcher routes ``prompt`` of ``plan`` by."""
    return RoutingRequest(
        plan.model_id, prompt.ids, prompt.text or None, ctx.headers, ctx.routing_key, plan.adapter
    )


def _migrations(
    open_stream: Opener, plan: Plan, work: Work, ctx: RequestContext, attempts: int
) -> list[Migration] | None:
    """How each prompt's answer goes on elsewhere when its worker fails after its first token
    (None: failover is off)."""
    if attempts <= 0:
        return None
    return [
        Migration(open_stream, plan, _routing(plan, prompt, ctx), request, attempts)
        for prompt, request in zip(plan.prompts, work.requests, strict=True)
    ]


async def _moved(source: SessionEvents, failure: WorkerRequestError) -> bool:
    """Whether the answer of ``source`` goes on on another worker after ``failure``."""
    migration = source.migration
    return migration is not None and await migration.resume(source, failure)


class _Payloads:
    """A streamed answer's payloads per batch of events, prompt after prompt; every session
    is closed at the end, also those of prompts not reached (the client left, or an earlier
    prompt failed).

    A stream step is this one coroutine: it awaits the worker session's next batch and turns
    it into events and payloads with plain calls (no generator per layer in between).
    """

    __slots__ = ("_done", "_opening", "_prompt", "_renderer", "_sources")

    def __init__(self, renderer: Renderer, sources: list[SessionEvents]) -> None:
        self._renderer = renderer
        #: One per prompt, each with its session.
        self._sources = sources
        #: The prompt being read, and its opening payloads while they were not sent (``()``
        #: once they were: no list kept per waiting stream).
        self._prompt = 0
        self._opening: Sequence[Any] | None = None
        self._done = False

    def __aiter__(self) -> _Payloads:
        return self

    async def __anext__(self) -> list[Any]:
        if self._done:
            raise StopAsyncIteration
        renderer = self._renderer
        sources = self._sources
        try:
            while self._prompt < len(sources):
                source = sources[self._prompt]
                opening = self._opening
                if opening is None:
                    opening = self._opening = renderer.opening(self._prompt) or ()
                try:
                    batch = await source.session.next_batch()
                except WorkerRequestError as exc:
                    if await _moved(source, exc):
                        continue
                    raise
                events = source.take(batch)
                payloads = renderer.stream(events) if events else []
                if opening and events:
                    payloads = [*opening, *payloads]
                    self._opening = ()
                if source.ended:
                    await source.aclose()
                    self._prompt += 1
                    self._opening = None
                if payloads:
                    return payloads
            self._done = True
            await renderer.complete()
            closing = renderer.closing()
        except BaseException:
            await self.aclose()
            raise
        await self.aclose()
        if closing:
            return closing
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Close every event source and session (idempotent)."""
        self._done = True
        for source in self._sources:
            await source.aclose()  # books its tokens and closes its session


def _sources(
    work: Work, sessions: list[GenerateSession], migrations: list[Migration] | None = None
) -> list[SessionEvents]:
    """The event source of each prompt's session (with how its answer moves, if it may)."""
    return [
        SessionEvents(
            session,
            choices,
            worker_streams=work.worker_streams,
            prompt_index=k,
            meter=session.meter,
            prompt_logprobs=work.prompt_logprobs,
            migration=None if migrations is None else migrations[k],
        )
        for k, (session, choices) in enumerate(zip(sessions, work.processors, strict=True))
    ]


@dataclass(frozen=True, slots=True)
class _Retry(Generic[R]):
    """What a one-shot answer needs to start over."""

    endpoint: Endpoint[R]
    request: R
    ctx: RequestContext
    open_stream: Opener
    plan: Plan
    #: Wraps each renderer (the request's spans), if anything does.
    watch: Callable[[Renderer], Renderer] | None
    #: Migrations each answer may make.
    moves: int = 0


async def _one_shot(
    retry: _Retry[Any],
    renderer: Renderer,
    sources: list[SessionEvents],
    sessions: list[GenerateSession],
) -> Any:
    """A one-shot answer: every batch folded. A worker that fails after its first response has
    shown the client nothing yet, so the request starts over (fresh worker requests,
    processors and renderer) on another worker, as after a failure before the first response
    (the dispatcher's attempts decide whether one may follow)."""
    while True:
        try:
            return await _folded(renderer, sources, sessions)
        except WorkerRequestError as exc:
            if not exc.retryable or exc.worker_id is None:
                raise
            failure = exc
        work = build(retry.plan, retry.ctx)
        renderer = retry.endpoint.renderer(retry.request, retry.plan, retry.ctx)
        if retry.watch is not None:
            renderer = retry.watch(renderer)
        sessions = await dispatch(retry.open_stream, retry.plan, work.requests, retry.ctx, failure)
        del failure  # no reference cycle through this frame
        moves = _migrations(retry.open_stream, retry.plan, work, retry.ctx, retry.moves)
        sources = _sources(work, sessions, moves)


async def _folded(
    renderer: Renderer, sources: list[SessionEvents], sessions: list[GenerateSession]
) -> Any:
    """Fold every batch of every source into ``renderer``'s answer (every session closed)."""
    try:
        for source in sources:
            while not source.ended:
                try:
                    batch = await source.session.next_batch()
                except WorkerRequestError as exc:
                    if await _moved(source, exc):
                        continue
                    raise
                events = source.take(batch)
                if events:
                    renderer.fold(events)
            await source.aclose()
    finally:
        await _close(sessions, sources)
    await renderer.complete()
    return renderer.answer()


async def _close(sessions: list[GenerateSession], sources: Sequence[SessionEvents] = ()) -> None:
    """Close the event sources (a stream left mid-way books its tokens), then every session
    (idempotent: a finished stream closed its own)."""
    for source in sources:
        await source.aclose()
    for session in sessions:
        await session.aclose()
