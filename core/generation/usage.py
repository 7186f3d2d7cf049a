"""OpenAI ``usage`` objects: the request's totals, and the running counts of a stream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, Usage
from turnout.generation.requests import StreamOptions


def usage_dict(usage: Usage) -> dict[str, Any]:
    """OpenAI ``usage`` object."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


def add_usage(total: Usage, usage: Usage) -> None:
    """Add one prompt's counts to ``total`` (several prompts in one request)."""
    total.prompt_tokens += usage.prompt_tokens
    total.completion_tokens += usage.completion_tokens
    total.cached_tokens += usage.cached_tokens
    total.reasoning_tokens += usage.reasoning_tokens


class RunningUsage:
    """Token counts so far, for ``stream_options.continuous_usage_stats``: like SGLang and
    vLLM, a chunk of a choice carries its prompt's tokens and that choice's tokens so far (and
    how many of them are reasoning)."""

    __slots__ = ("_choices", "_n", "_prompts", "_reasoning")

    def __init__(self, prompt_tokens: Sequence[int], n: int) -> None:
        """``prompt_tokens``: per prompt; choice ``i`` answers prompt ``i // n``."""
        self._prompts = list(prompt_tokens)
        self._n = n
        self._choices: dict[int, int] = {}
        self._reasoning: dict[int, int] = {}

    def note(self, event: Event) -> None:
        """Take the counts an event carries."""
        if isinstance(event, ChoiceDelta | ChoiceEnd):
            self._choices[event.index] = event.completion_tokens
            self._reasoning[event.index] = event.reasoning_tokens

    def of(self, index: int) -> dict[str, Any]:
        """The ``usage`` object of a chunk of choice ``index``."""
        prompt = self._prompts[index // self._n]
        completion = self._choices.get(index, 0)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "completion_tokens_details": {"reasoning_tokens": self._reasoning.get(index, 0)},
        }


def running_usage(
    options: StreamOptions | None, prompt_tokens: Sequence[int], n: int
) -> RunningUsage | None:
    """The usage so far to report in every chunk, when the client asked for it."""
    if options is None or not options.continuous_usage_stats:
        return None
    return RunningUsage(prompt_tokens, n)
