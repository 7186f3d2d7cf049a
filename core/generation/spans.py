"""The flow's stage spans, used only while tracing is on (:mod:`turnout.generation.flow`).

Beside the dispatcher's spans (worker selection, one per ``Generate`` attempt), a request gets:

* ``prepare`` — check, model, chat template and tokenization (the flow's first stage);
* ``time to first token`` — from the request's arrival to the first output rendered;
* ``stream`` — from the worker's first response to the answer's end: tokens, finish reasons,
  and how it ended (``ok``, ``cancelled`` when the client left, ``failed``).

Batches are watched through the renderer (every batch of every prompt passes through it), and
the end through the answer: the payload generator of a stream, the fold of a one-shot answer.
Nothing here imports OpenTelemetry: :class:`~turnout.observability.otel.Tracing` does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable
from typing import TYPE_CHECKING, Any, Final

from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, Usage

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from turnout.generation.context import RequestContext
    from turnout.generation.flow import PayloadStream, Renderer
    from turnout.generation.plan import Plan
    from turnout.observability.otel import Tracing

__all__ = ["RequestSpans", "traced_prepare"]

#: Most finish reasons listed on a stream span (``n`` can be large).
_MAX_REASONS: Final = 32


async def traced_prepare(tracing: Tracing, stage: Awaitable[Plan]) -> Plan:
    """Await the prepare stage in a ``prepare`` span."""
    span = tracing.start_span("prepare")
    try:
        plan = await stage
    except Exception as exc:
        tracing.end(span, f"{type(exc).__name__}: {exc}")
        raise
    except BaseException:
        tracing.end(span, attributes={"turnout.outcome": "cancelled"})
        raise
    tracing.end(
        span,
        attributes={
            "gen_ai.request.model": plan.model_id,
            "gen_ai.usage.input_tokens": sum(len(prompt.ids) for prompt in plan.prompts),
            "turnout.prompts": len(plan.prompts),
            "turnout.stream": plan.stream,
        },
    )
    return plan


def _wall_ns(monotonic: float) -> int:
    """The wall-clock time (ns since the epoch) of a ``time.monotonic()`` reading."""
    return time.time_ns() - round((time.monotonic() - monotonic) * 1e9)


class RequestSpans:
    """The ``time to first token`` and ``stream`` spans of one request (opened once its
    worker sessions are open)."""

    __slots__ = (
        "_batches",
        "_ended",
        "_input_tokens",
        "_output_tokens",
        "_reasons",
        "_stream",
        "_tracing",
        "_ttft",
    )

    def __init__(self, tracing: Tracing, ctx: RequestContext) -> None:
        self._tracing = tracing
        self._ttft: Span | None = tracing.start_span(
            "time to first token", start_time=_wall_ns(ctx.started)
        )
        self._stream = tracing.start_span("stream")
        self._batches = 0
        self._input_tokens = 0
        self._output_tokens = 0
        self._reasons: list[str] = []
        self._ended = False

    def renderer(self, renderer: Renderer) -> Renderer:
        """``renderer``, watched: every batch it renders or folds is seen here first."""
        return _WatchedRenderer(renderer, self)

    def seen(self, events: list[Event]) -> None:
        """One batch of events."""
        self._batches += 1
        for event in events:
            if isinstance(event, ChoiceDelta):
                if self._ttft is not None and not event.is_empty():
                    self._tracing.end(self._ttft)
                    self._ttft = None
            elif isinstance(event, ChoiceEnd):
                if len(self._reasons) < _MAX_REASONS:
                    self._reasons.append(event.finish_reason)
            elif isinstance(event, Usage):
                self._input_tokens += event.prompt_tokens
                self._output_tokens += event.completion_tokens

    def migrated(self, source: str, target: str, tokens: int, reason: str) -> None:
        """The answer moved from worker ``source`` to ``target`` after ``tokens`` tokens (a
        ``migration`` event on the stream span)."""
        self._stream.add_event(
            "migration",
            {
                "turnout.migration.from": source,
                "turnout.migration.to": target,
                "turnout.migration.tokens": tokens,
                "turnout.migration.reason": reason,
            },
        )

    async def payloads(self, payloads: PayloadStream) -> AsyncGenerator[list[Any], None]:
        """A streamed answer's payloads, ending the spans when the stream ends."""
        try:
            async for item in payloads:
                yield item
        except BaseException as exc:
            self.end(exc)
            raise
        else:
            self.end(None)
        finally:
            await payloads.aclose()

    async def folded(self, answer: Awaitable[Any]) -> Any:
        """A one-shot answer's body, ending the spans once it is folded."""
        try:
            body = await answer
        except BaseException as exc:
            self.end(exc)
            raise
        self.end(None)
        return body

    def end(self, exc: BaseException | None) -> None:
        """End both spans (once): how the answer ended, what it used."""
        if self._ended:
            return
        self._ended = True
        tracing = self._tracing
        error = None
        if exc is None:
            outcome = "ok"
        elif isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
            outcome = "cancelled"
        else:
            outcome = "failed"
            error = f"{type(exc).__name__}: {exc}"
        if self._ttft is not None:  # no output came
            tracing.end(self._ttft, attributes={"turnout.outcome": outcome})
            self._ttft = None
        tracing.end(
            self._stream,
            error,
            {
                "turnout.outcome": outcome,
                "turnout.batches": self._batches,
                "gen_ai.usage.input_tokens": self._input_tokens,
                "gen_ai.usage.output_tokens": self._output_tokens,
                "gen_ai.response.finish_reasons": self._reasons,
            },
        )


class _WatchedRenderer:
    """A renderer that shows each batch to :class:`RequestSpans` before rendering it."""

    __slots__ = ("_inner", "_spans")

    def __init__(self, inner: Renderer, spans: RequestSpans) -> None:
        self._inner = inner
        self._spans = spans

    def opening(self, prompt_index: int) -> list[Any]:
        return self._inner.opening(prompt_index)

    def stream(self, events: list[Event]) -> list[Any]:
        self._spans.seen(events)
        return self._inner.stream(events)

    def closing(self) -> list[Any]:
        return self._inner.closing()

    async def complete(self) -> None:
        await self._inner.complete()

    def fold(self, events: list[Event]) -> None:
        self._spans.seen(events)
        self._inner.fold(events)

    def answer(self) -> Any:
        return self._inner.answer()
