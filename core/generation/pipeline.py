"""Response processing: a worker session's responses, batch by batch, through the per-choice
processors into events (the one walk over the responses)."""

from __future__ import annotations

import time
from array import array
from typing import Protocol

from turnout.errors import ApiError, bad_request
from turnout.generation.choice import ChoiceProcessor, TokenPiece
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, PromptLogprobs, Usage
from turnout.generation.migration import Migration
from turnout.generation.prompt_logprobs import read_prompt_logprobs
from turnout.routing.types import RoutingRequest
from turnout.tokenizer.stops import StopRegexTimeout
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.workers.errors import WorkerRequestError


class StreamMeter(Protocol):
    """Observes one worker stream (time to first token, inter-token latency, tokens), fed by
    :class:`SessionEvents` from its one walk over the responses."""

    def arrived(self, streamed: int, at: float) -> None:
        """A batch brought tokens at ``at`` (``time.perf_counter()``): ``streamed`` of them in
        stream chunks (0 when a whole output came in one message)."""
        ...

    def finish(self, prompt_tokens: int, generated: int) -> None:
        """The stream ended: book its prompt tokens and the tokens the worker generated."""
        ...


class GenerateSession(Protocol):
    """What the flow reads of one started Generate stream (the first response already
    arrived): routing's :class:`~turnout.routing.session.WorkerSession`, or for a
    prefill-decode model a pair read from its decode worker (:mod:`turnout.routing.pd`)."""

    @property
    def meter(self) -> StreamMeter | None:
        """What observes this stream for the request (``None``: nothing)."""
        ...

    async def next_batch(self) -> list[pb.GenerateResponse]:
        """The responses that arrived together (the first ones included); [] at the end."""
        ...

    async def aclose(self) -> None:
        """Stop: cancel the stream and abort the request on the worker."""
        ...


class Opener(Protocol):
    """Opens a stream on a worker for a model (selection, retries and breakers inside)."""

    async def __call__(
        self,
        model: str,
        routing: RoutingRequest,
        request: pb.GenerateRequest,
        after: WorkerRequestError | None = None,
    ) -> GenerateSession:
        """Select a worker and start ``request`` there. ``after``: the failure of the
        request's previous session, which its client saw nothing of (a one-shot answer): the
        request goes on as after a failure before the first response, on another worker."""
        ...


class SessionEvents:
    """The events of one worker session, batch by batch: the one walk over its responses.

    The caller awaits ``session.next_batch()`` itself and hands each batch to :meth:`take`, so
    a stream step costs no coroutine or generator of this layer. Consecutive chunks of one
    choice in a batch are processed as one (one detokenizer and parser step, one delta), so a
    router that falls behind catches up in fewer, larger steps. A choice with stop strings
    takes its chunks one by one: a stop ends it at the chunk that completed it, so its tokens
    and logprobs do not depend on how chunks were batched. Once every choice ended (the worker
    completed them, or turnout matched stops), the batch's events end with a :class:`Usage`
    event (of prompt ``prompt_index``) and :attr:`ended` is set; the caller then closes this,
    which cancels the call and aborts the request on the worker if it still runs. ``meter`` is
    told of each batch that brought tokens, and of the stream's tokens when it is closed.
    """

    __slots__ = (
        "_cached_tokens",
        "_completion",
        "_finished",
        "_generated",
        "_logprobs",
        "_mergeable",
        "_meter",
        "_moved",
        "_processors",
        "_prompt_index",
        "_prompt_logprobs",
        "_prompt_tokens",
        "_reasoning",
        "_reasoning_base",
        "_reasoning_seen",
        "_remaining",
        "_streamed",
        "_worker_completed",
        "_worker_streams",
        "ended",
        "migration",
        "session",
    )

    def __init__(
        self,
        session: GenerateSession,
        processors: list[ChoiceProcessor],
        *,
        worker_streams: bool = True,
        prompt_index: int = 0,
        meter: StreamMeter | None = None,
        prompt_logprobs: tuple[TokenPiece, int] | None = None,
        migration: Migration | None = None,
    ) -> None:
        """``prompt_logprobs``: the prompt's logprobs were asked for; its tokens' text and how
        many alternatives to keep (a :class:`PromptLogprobs` event comes first).
        ``migration``: how the answer goes on elsewhere when its worker fails (the token ids
        generated are kept in it)."""
        # One object per stream, not a walker and its state: an open stream waits long between
        # batches, and every object it keeps is walked by each young garbage collection.
        self.session = session
        self._prompt_index = prompt_index
        #: Set until the prompt's logprobs were handed out.
        self._prompt_logprobs = prompt_logprobs
        #: Every choice ended: the last batch's events were handed out.
        self.ended = False
        self._finished = False
        self._processors = processors
        self._worker_streams = worker_streams
        self._meter = meter
        #: Choices not ended yet.
        self._remaining = len(processors)
        self._prompt_tokens = 0
        self._cached_tokens = 0
        self._completion: dict[int, int] = {}
        self._reasoning: dict[int, int] = {}
        #: Per choice: its consecutive chunks may be merged (a tuple of bools is not tracked).
        self._mergeable = tuple(not p.watches_stops for p in processors)
        #: Some choice reports logprobs (else the chunks' logprobs are not even looked at).
        self._logprobs = any(p.reports_logprobs for p in processors)
        #: Tokens the worker sent in stream chunks, and the sum of its completion counts
        #: (what it generated, past a stop turnout matched too).
        self._streamed = 0
        self._worker_completed = 0
        self.migration = migration
        #: Where each choice's generated ids are kept while the answer may move (None:
        #: nowhere).
        self._generated = migration.generated if migration is not None else None
        #: Per choice, tokens generated before the current session (its worker's counts leave
        #: them out); None while the first session runs.
        self._moved: array[int] | None = None
        #: Per choice, the worker's reasoning count of the current session, and the counts of
        #: the sessions before it (each worker counts its part); kept while the answer may move.
        self._reasoning_seen: array[int] | None = None
        self._reasoning_base: array[int] | None = None
        if self._generated is not None:
            self._reasoning_seen = array("q", bytes(8 * len(processors)))
            self._reasoning_base = array("q", bytes(8 * len(processors)))

    def take(self, batch: list[pb.GenerateResponse]) -> list[Event]:
        """The events of ``batch`` (what ``session.next_batch()`` returned; may be none). An
        empty batch means the worker ended the stream, which before every choice ended is a
        502."""
        try:
            if len(batch) == 1 and self._remaining and batch[0].HasField("chunk"):
                # The usual step of a paced stream, one message of one choice's tokens: pushed
                # from here (what _take does with it, without its run bookkeeping).
                meter = self._meter
                at = time.perf_counter() if meter is not None else 0.0
                counted = self._streamed
                events: list[Event] = []
                self._push(batch[0].chunk, events)
                if meter is not None and self._streamed > counted:
                    meter.arrived(self._streamed - counted, at)
            elif batch:
                events = self._take(batch)
            else:
                raise ApiError(502, "the worker ended the stream before every choice completed")
        except StopRegexTimeout as exc:
            raise bad_request(str(exc), "stop_regex") from None
        if self._remaining == 0:
            events.append(self._usage())
            self.ended = True
        return events

    def open_choices(self) -> list[int]:
        """The indices of the choices that have not ended."""
        return [index for index, processor in enumerate(self._processors) if not processor.done]

    def continue_on(
        self, session: GenerateSession, generated: array[int], choices: list[int]
    ) -> None:
        """Read the rest of the answer from ``session``, where ``choices`` go on on other
        workers (``generated[i]``: the tokens of choice i before its current session). The
        prompt's token counts stay the first worker's, and the new workers' completion counts
        (of their part) count the tokens before too."""
        self.session = session
        self._moved = generated
        seen, base = self._reasoning_seen, self._reasoning_base
        if seen is not None and base is not None:
            for index in choices:
                base[index] += seen[index]
                seen[index] = 0

    async def aclose(self) -> None:
        """Book the stream's tokens on the meter (once) and close the session (idempotent)."""
        if not self._finished:
            self._finished = True
            if self._meter is not None:
                self._meter.finish(self._prompt_tokens, max(self._streamed, self._worker_completed))
        await self.session.aclose()

    def _take(self, batch: list[pb.GenerateResponse]) -> list[Event]:
        """Events for one batch of responses (which are also counted for the meter).

        A run of chunks is merged into one message by protobuf itself (token ids and logprobs
        concatenated in C), so a token costs no Python work; with one choice, a chunk's index
        is not even read on its own (a bad one survives the merge and is refused with the run).
        """
        at = time.perf_counter() if self._meter is not None else 0.0
        events: list[Event] = []
        run: pb.GenerateResponse | None = None
        merged = False  # ``run`` is a merge of several chunks (not one of the batch's messages)
        run_index = -1
        several = len(self._processors) > 1
        counted = self._streamed
        whole = False
        for response in batch:
            kind = response.WhichOneof("response")
            if kind == "chunk":
                if not self._remaining:  # turnout ended every choice: the rest is only counted
                    self._streamed += len(response.chunk.token_ids)
                    continue
                index = response.chunk.index if several else 0
                if run is not None and index == run_index and self._mergeable[index]:
                    if not merged:
                        first, run, merged = run, pb.GenerateResponse(), True
                        run.MergeFrom(first)
                    run.MergeFrom(response)
                    continue
                if run is not None:
                    self._push(run.chunk, events)
                run, run_index, merged = response, index, False
            elif kind == "complete":
                if run is not None:
                    self._push(run.chunk, events)
                    run = None
                done = response.complete
                self._worker_completed += done.completion_tokens + _count(self._moved, done.index)
                if not self._streamed:  # a one-message answer: its tokens come now
                    whole = whole or bool(done.output_ids)
                if self._remaining:
                    self._complete(done, events)
        if run is not None:
            self._push(run.chunk, events)
        streamed = self._streamed - counted
        if self._meter is not None and (streamed or whole):
            self._meter.arrived(streamed, at)
        return events

    def _usage(self) -> Usage:
        """The stream's usage (once every choice ended)."""
        return Usage(
            prompt_tokens=self._prompt_tokens,
            completion_tokens=sum(self._completion.values()),
            cached_tokens=self._cached_tokens,
            reasoning_tokens=sum(self._reasoning.values()),
            prompt_index=self._prompt_index,
        )

    def _push(self, chunk: pb.GenerateStreamChunk, events: list[Event]) -> None:
        """One run of chunks of a choice (counted, then processed unless the choice ended)."""
        # A slice is a plain list, made in C: iterating the protobuf container (the
        # detokenizer extends its window with it) costs about 0.3 µs per token.
        token_ids = chunk.token_ids[:]
        self._streamed += len(token_ids)
        # Not max(): with two arguments it costs about 1k instructions, for every message.
        prompt_tokens, cached_tokens = chunk.prompt_tokens, chunk.cached_tokens
        if (
            prompt_tokens > self._prompt_tokens or cached_tokens > self._cached_tokens
        ) and self._moved is None:
            self._prompt_tokens = max(self._prompt_tokens, prompt_tokens)
            self._cached_tokens = max(self._cached_tokens, cached_tokens)
        if self._prompt_logprobs is not None and chunk.HasField("input_logprobs"):
            self._prompt_event(chunk.input_logprobs, events)
        processors = self._processors
        index = chunk.index  # a bad one fails in _processor()
        processor = processors[index] if index < len(processors) else _processor(processors, index)
        generated = self._generated
        if generated is not None:
            generated[index].extend(token_ids)
        if processor.done:
            return
        logprobs = (
            chunk.output_logprobs if self._logprobs and chunk.HasField("output_logprobs") else None
        )
        delta = processor.push(token_ids, logprobs)
        counted = chunk.reasoning_tokens
        seen, base = self._reasoning_seen, self._reasoning_base
        if seen is not None and base is not None:  # the count goes on across moves
            seen[index] = counted
            counted += base[index]
        if delta is not None:
            delta.reasoning_tokens = processor.reasoning_tokens(counted)
            events.append(delta)
        if processor.matched_stop is not None:  # stopped early
            tail, end = processor.finish("stop", None)
            self._ended(tail, end, events)

    def _complete(self, done: pb.GenerateComplete, events: list[Event]) -> None:
        if self._moved is None:
            self._prompt_tokens = max(self._prompt_tokens, done.prompt_tokens)
            self._cached_tokens = max(self._cached_tokens, done.cached_tokens)
        if self._prompt_logprobs is not None and done.HasField("input_logprobs"):
            self._prompt_event(done.input_logprobs, events)
        processor = _processor(self._processors, done.index)
        if processor.done:
            return
        if not self._worker_streams:  # the whole output comes in this one message
            logprobs = done.output_logprobs if done.HasField("output_logprobs") else None
            delta = processor.push(done.output_ids[:], logprobs)
            if delta is not None:
                events.append(delta)
        which = done.WhichOneof("matched_stop")
        matched: str | int | None = getattr(done, which) if which else None
        reason = done.finish_reason or "stop"
        completion = done.completion_tokens or None
        if completion is not None:
            completion += _count(self._moved, done.index)
        tail, end = processor.finish(
            reason,
            matched,
            completion,
            done.reasoning_tokens + _count(self._reasoning_base, done.index),
        )
        self._ended(tail, end, events)

    def _prompt_event(self, given: pb.InputLogProbs, events: list[Event]) -> None:
        """The prompt's logprobs, once (each choice's first message may repeat them)."""
        assert self._prompt_logprobs is not None
        piece, top = self._prompt_logprobs
        self._prompt_logprobs = None
        tokens = read_prompt_logprobs(given, piece, top)
        events.append(PromptLogprobs(self._prompt_index, tokens))

    def _ended(self, tail: ChoiceDelta | None, end: ChoiceEnd, events: list[Event]) -> None:
        if tail is not None:
            events.append(tail)
        events.append(end)
        self._completion[end.index] = end.completion_tokens
        self._reasoning[end.index] = end.reasoning_tokens
        self._remaining -= 1


def _count(counts: array[int] | None, index: int) -> int:
    """``counts[index]``, 0 without counts (or for a bad index, which is refused elsewhere)."""
    return counts[index] if counts is not None and index < len(counts) else 0


def _processor(processors: list[ChoiceProcessor], index: int) -> ChoiceProcessor:
    if index >= len(processors):
        raise ApiError(502, f"the worker sent choice index {index} for n={len(processors)}")
    return processors[index]
