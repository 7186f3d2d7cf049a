"""The event stream every endpoint consumes: streaming emits it, one-shot answers fold it.

A choice's ``index`` counts across the request's prompts: choice ``i`` of prompt ``k`` is
``k * n + i``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec


@dataclass(slots=True)
class TokenLogprob:
    """Log probability of one sampled token (its text, real bytes), with its alternatives."""

    token_id: int
    token: str
    #: ``None`` only for a prompt's first token (nothing precedes it).
    logprob: float | None
    top: list[TokenLogprob] = field(default_factory=list)
    raw: bytes = b""
    #: The logprobs of the token ids the request asked about (``token_ids_logprob``).
    wanted: list[TokenLogprob] = field(default_factory=list)


@dataclass(slots=True)
class ToolCallPiece:
    """A tool-call delta with the id the client sees (set on the call's first piece)."""

    index: int
    id: str | None
    name: str | None
    arguments: str


class ChoiceDelta(msgspec.Struct):
    """New output of one choice.

    A ``msgspec.Struct`` rather than a dataclass: one is made per worker message of a stream,
    and its constructor (in C) costs half the dataclass's."""

    index: int
    content: str = ""
    reasoning: str = ""
    #: A shared empty tuple until a call comes (no list made for each delta of text).
    tool_calls: Sequence[ToolCallPiece] = ()
    logprobs: list[TokenLogprob] | None = None
    token_ids: list[int] | None = None
    #: The choice's tokens so far, this delta's included (running usage).
    completion_tokens: int = 0
    #: How many of them are reasoning (the worker's count, else turnout's estimate).
    reasoning_tokens: int = 0

    def is_empty(self) -> bool:
        """True when there is nothing to send."""
        return not (
            self.content or self.reasoning or self.tool_calls or self.logprobs or self.token_ids
        )


@dataclass(slots=True)
class ChoiceEnd:
    """One choice finished."""

    index: int
    finish_reason: str
    matched_stop: str | int | None
    completion_tokens: int
    reasoning_tokens: int


@dataclass(slots=True)
class Usage:
    """Token counts of one prompt and all its choices (the last event of its stream)."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    #: Which prompt of the request (0 when it has one).
    prompt_index: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(slots=True)
class PromptLogprobs:
    """The log probabilities of one prompt's tokens (asked for by the endpoint), before its
    choices' first deltas; the first token has none."""

    prompt_index: int
    tokens: list[TokenLogprob]


Event = ChoiceDelta | ChoiceEnd | Usage | PromptLogprobs
