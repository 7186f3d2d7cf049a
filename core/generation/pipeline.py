"""One pipeline for every generation endpoint: build the worker request, open the stream on a
worker chosen by the model's policy, and turn its responses into events."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import regex

from turnout.generation.choice import CallIds, ChoiceProcessor
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, Usage
from turnout.generation.models import ModelRuntime
from turnout.generation.requests import SamplingFields, stop_strings
from turnout.routing.types import RoutingRequest
from turnout.server.errors import ApiError, bad_request
from turnout.tokenizer.stops import StopRegexTimeout, StopStringMatcher, compile_stop_regexes
from turnout.tool_calls.types import ToolParser, Tools
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.sampling import Constraint, InvalidSamplingParams, build_generate_request
from turnout.wire.sampling import build_sampling_params as _build_sampling_params


class GenerateSession(Protocol):
    """A started Generate stream on one worker (the first response already arrived)."""

    async def next_batch(self) -> list[pb.GenerateResponse]:
        """The responses that arrived together (the first ones included); [] at the end."""
        ...

    async def aclose(self) -> None:
        """Stop: cancel the stream and abort the request on the worker."""
        ...


class Opener(Protocol):
    """Opens a stream on a worker for a model (selection, retries and breakers inside)."""

    async def __call__(
        self, model: str, routing: RoutingRequest, request: pb.GenerateRequest
    ) -> GenerateSession:
        """Select a worker and start ``request`` there."""
        ...


@dataclass(slots=True)
class OutputOptions:
    """How each choice's output is processed."""

    n: int
    stops: list[str]
    no_stop_trim: bool
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    logprobs: bool
    stop_regexes: list[regex.Pattern[str]] = field(default_factory=list)
    keep_token_ids: bool = False
    tools: Tools = None
    tool_parser: Callable[[], ToolParser] | None = None
    #: The tool parser's registered name (attributes its failures).
    tool_parser_name: str | None = None
    reasoning: bool = False
    start_in_reasoning: bool | None = None
    history_calls: int = 0
    #: At most this many tool calls per choice (``parallel_tool_calls: false`` gives 1).
    max_calls: int | None = None

    @property
    def has_stops(self) -> bool:
        """True when turnout matches stop strings or stop regexes on the output."""
        return bool(self.stops or self.stop_regexes)


#: Tokens per worker message when turnout streams from the worker only to watch for its stop
#: strings while the client waits for one answer: 16x fewer messages, at most 16 tokens wasted.
STOP_WATCH_INTERVAL = 16


def worker_streaming(client_streams: bool, has_stops: bool) -> tuple[bool, int | None]:
    """Whether to ask the worker for a stream, and with how many tokens per message.

    A client that streams gets every token as it comes. A one-shot answer is asked of the
    worker in one message — unless turnout must watch for stop strings to abort early.
    """
    if client_streams:
        return True, None
    if has_stops:
        return True, STOP_WATCH_INTERVAL
    return False, None


def sampling_params(
    request: SamplingFields,
    *,
    max_tokens: int | None,
    skip_special_tokens: bool,
    constraint: Constraint | None,
    stop_token_ids: Sequence[int] = (),
    stream_interval: int | None = None,
) -> pb.SamplingParams:
    """Map the request's sampling fields onto fully populated SamplingParams."""
    explicit: dict[str, Any] = {}
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
    ):
        value = getattr(request, name)
        if value is not None:
            explicit[name] = value
    custom = {"seed": request.seed} if request.seed is not None else None
    try:
        return _build_sampling_params(
            max_new_tokens=max_tokens,
            n=request.n,
            min_new_tokens=request.min_tokens or 0,
            stop_token_ids=list(stop_token_ids),
            ignore_eos=request.ignore_eos,
            no_stop_trim=request.no_stop_trim,
            skip_special_tokens=skip_special_tokens,
            spaces_between_special_tokens=request.spaces_between_special_tokens,
            constraint=constraint,
            logit_bias=request.logit_bias,
            custom_params=custom,
            stream_interval=stream_interval,
            **explicit,
        )
    except InvalidSamplingParams as exc:
        raise ApiError(400, str(exc), code="invalid_value") from None


def make_processors(runtime: ModelRuntime, options: OutputOptions) -> list[ChoiceProcessor]:
    """Fresh per-choice processors (no parser state is shared between requests or choices)."""
    tokenizer = runtime.tokenizer
    skip_special = options.skip_special_tokens and not (
        runtime.parsers_need_special_tokens and (options.tool_parser or options.reasoning)
    )
    hidden = frozenset() if options.no_stop_trim else runtime.stop_token_ids
    token_piece = tokenizer.pieces.piece if options.logprobs else None
    processors = []
    for index in range(options.n):
        tool_parser = options.tool_parser() if options.tool_parser is not None else None
        reasoning = None
        if options.reasoning and runtime.reasoning_parser is not None:
            reasoning = runtime.reasoning_parser(start_in_reasoning=options.start_in_reasoning)
        stops = (
            StopStringMatcher(
                options.stops, keep_matched=options.no_stop_trim, patterns=options.stop_regexes
            )
            if options.has_stops
            else None
        )
        processors.append(
            ChoiceProcessor(
                index,
                decoder=tokenizer.incremental_detokenizer(
                    skip_special_tokens=skip_special,
                    spaces_between_special_tokens=options.spaces_between_special_tokens,
                ),
                stops=stops,
                reasoning=reasoning,
                tool_parser=tool_parser,
                tools=options.tools,
                call_ids=CallIds(
                    getattr(tool_parser, "call_id_style", "openai"), options.history_calls
                ),
                hidden_stop_ids=hidden,
                token_piece=token_piece,
                keep_token_ids=options.keep_token_ids,
                max_calls=options.max_calls,
                tool_parser_name=options.tool_parser_name,
                reasoning_parser_name=runtime.reasoning_parser_name,
            )
        )
    return processors


def output_options(request: SamplingFields, **extra: Any) -> OutputOptions:
    """Output options common to every endpoint (400 for a bad ``stop_regex``)."""
    try:
        regexes = compile_stop_regexes(stop_strings(request.stop_regex))
    except ValueError as exc:
        raise bad_request(str(exc), "stop_regex") from None
    return OutputOptions(
        n=request.n,
        stops=stop_strings(request.stop),
        stop_regexes=regexes,
        no_stop_trim=request.no_stop_trim,
        skip_special_tokens=request.skip_special_tokens,
        spaces_between_special_tokens=request.spaces_between_special_tokens,
        **extra,
    )


async def stream_events(
    session: GenerateSession, processors: list[ChoiceProcessor], *, worker_streams: bool = True
) -> AsyncIterator[list[Event]]:
    """Drive the worker stream through the processors: one list of events per batch of worker
    responses that arrived together; the last list ends with a :class:`Usage` event.

    Consecutive chunks of one choice in a batch are processed as one (one detokenizer and
    parser step, one delta), so a router that falls behind catches up in fewer, larger steps.
    A choice with stop strings takes its chunks one by one: a stop ends it at the chunk that
    completed it, so its tokens and logprobs do not depend on how chunks were batched.
    When turnout itself ended every choice (stop strings), the stream is closed early, which
    cancels the call and aborts the request on the worker.
    """
    driver = _Driver(processors, worker_streams)
    try:
        while True:
            batch = await session.next_batch()
            if not batch:
                break
            events = driver.take(batch)
            if driver.remaining == 0:
                events.append(driver.usage())
                yield events
                return
            if events:
                yield events
    except StopRegexTimeout as exc:
        raise bad_request(str(exc), "stop_regex") from None
    finally:
        await session.aclose()
    raise ApiError(502, "the worker ended the stream before every choice completed")


class _Driver:
    """The state of one worker stream between batches: choices left, token counts."""

    __slots__ = (
        "cached_tokens",
        "completion",
        "mergeable",
        "processors",
        "prompt_tokens",
        "reasoning",
        "remaining",
        "worker_streams",
    )

    def __init__(self, processors: list[ChoiceProcessor], worker_streams: bool) -> None:
        self.processors = processors
        self.worker_streams = worker_streams
        self.remaining = len(processors)
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.completion: dict[int, int] = {}
        self.reasoning: dict[int, int] = {}
        self.mergeable = [not p.watches_stops for p in processors]

    def take(self, batch: list[pb.GenerateResponse]) -> list[Event]:
        """Events for one batch of responses."""
        events: list[Event] = []
        run_index = -1
        run_ids: Sequence[int] | list[int] = ()
        run_logprobs: list[Any] = []
        for response in batch:
            if self.remaining == 0:
                break
            kind = response.WhichOneof("response")
            if kind == "chunk":
                chunk = response.chunk
                self.prompt_tokens = max(self.prompt_tokens, chunk.prompt_tokens)
                self.cached_tokens = max(self.cached_tokens, chunk.cached_tokens)
                if chunk.index == run_index and self.mergeable[run_index]:
                    if not isinstance(run_ids, list):
                        run_ids = list(run_ids)
                    run_ids.extend(chunk.token_ids)
                else:
                    if run_index >= 0:
                        self._push(run_index, run_ids, run_logprobs, events)
                        run_logprobs = []
                    run_index, run_ids = chunk.index, chunk.token_ids
                    _processor(self.processors, run_index)  # a bad index fails here
                if chunk.HasField("output_logprobs"):
                    run_logprobs.append(chunk.output_logprobs)
            elif kind == "complete":
                if run_index >= 0:
                    self._push(run_index, run_ids, run_logprobs, events)
                    run_index, run_logprobs = -1, []
                self._complete(response.complete, events)
        if run_index >= 0 and self.remaining:
            self._push(run_index, run_ids, run_logprobs, events)
        return events

    def usage(self) -> Usage:
        """The stream's usage (once every choice ended)."""
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=sum(self.completion.values()),
            cached_tokens=self.cached_tokens,
            reasoning_tokens=sum(self.reasoning.values()),
        )

    def _push(
        self, index: int, token_ids: Sequence[int], logprobs: list[Any], events: list[Event]
    ) -> None:
        processor = _processor(self.processors, index)
        if processor.done:
            return
        delta = processor.push(token_ids, _joined_logprobs(logprobs))
        if delta is not None:
            events.append(delta)
        if processor.stopped_early:
            tail, end = processor.finish("stop", None)
            self._ended(tail, end, events)

    def _complete(self, done: pb.GenerateComplete, events: list[Event]) -> None:
        self.prompt_tokens = max(self.prompt_tokens, done.prompt_tokens)
        self.cached_tokens = max(self.cached_tokens, done.cached_tokens)
        processor = _processor(self.processors, done.index)
        if processor.done:
            return
        if not self.worker_streams:  # the whole output comes in this one message
            logprobs = done.output_logprobs if done.HasField("output_logprobs") else None
            delta = processor.push(done.output_ids, logprobs)
            if delta is not None:
                events.append(delta)
        which = done.WhichOneof("matched_stop")
        matched: str | int | None = getattr(done, which) if which else None
        reason = done.finish_reason or "stop"
        tail, end = processor.finish(
            reason, matched, done.completion_tokens or None, done.reasoning_tokens
        )
        self._ended(tail, end, events)

    def _ended(self, tail: ChoiceDelta | None, end: ChoiceEnd, events: list[Event]) -> None:
        if tail is not None:
            events.append(tail)
        events.append(end)
        self.completion[end.index] = end.completion_tokens
        self.reasoning[end.index] = end.reasoning_tokens
        self.remaining -= 1


def _joined_logprobs(parts: list[Any]) -> Any:
    """One ``OutputLogProbs`` for the chunks of a run (their repeated fields concatenated)."""
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    joined = type(parts[0])()
    for part in parts:
        joined.MergeFrom(part)
    return joined


@contextlib.asynccontextmanager
async def closed_on_failure() -> AsyncIterator[list[GenerateSession]]:
    """Collect sessions opened one after another (a batch of prompts); if opening a later one
    fails, close the earlier ones, which aborts them on their workers."""
    sessions: list[GenerateSession] = []
    try:
        yield sessions
    except BaseException:
        for session in sessions:
            await session.aclose()
        raise


def _processor(processors: list[ChoiceProcessor], index: int) -> ChoiceProcessor:
    if index >= len(processors):
        raise ApiError(502, f"the worker sent choice index {index} for n={len(processors)}")
    return processors[index]


def generate_request(
    request_id: str,
    prompt_ids: list[int],
    params: pb.SamplingParams,
    *,
    prompt_text: str = "",
    logprobs: bool = False,
    top_logprobs: int = 0,
    require_reasoning: bool = False,
    stream: bool = True,
) -> pb.GenerateRequest:
    """The worker request; see :func:`worker_streaming` for ``stream``."""
    try:
        return build_generate_request(
            request_id=request_id,
            input_ids=prompt_ids,
            sampling_params=params,
            original_text=prompt_text,
            stream=stream,
            return_logprob=logprobs,
            top_logprobs_num=top_logprobs,
            require_reasoning=require_reasoning,
        )
    except InvalidSamplingParams as exc:
        raise ApiError(400, str(exc), code="invalid_value") from None
