"""OpenAI text completion output: SSE chunks from events, or one response folded from them."""

from __future__ import annotations

from typing import Any

from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage
from turnout.generation.usage import RunningUsage, add_usage, usage_dict


def openai_logprobs(entries: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """OpenAI's completions ``logprobs`` object; ``offset``: where the first token's text
    starts in the choice's text. Each ``top_logprobs`` object holds the sampled token too (so
    up to ``logprobs + 1`` entries, as OpenAI documents; one with ``logprobs: 0``)."""
    tokens, values, offsets = [], [], []
    tops: list[dict[str, float]] = []
    for lp in entries:
        tokens.append(lp.token)
        values.append(lp.logprob)
        top = {alt.token: alt.logprob for alt in lp.top}
        top.setdefault(lp.token, lp.logprob)
        tops.append(top)
        offsets.append(offset)
        offset += len(lp.token)
    return {
        "tokens": tokens,
        "token_logprobs": values,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


class CompletionRenderer:
    """Streams ``text_completion`` chunks, or folds one ``text_completion``, from the events of
    ``n`` choices per prompt (choice ``k * n + i`` answers prompt ``k``).

    With ``echo`` each choice starts with its prompt's text. Streaming with ``include_usage``,
    the usage comes in a last chunk of its own; with ``running`` every chunk carries the usage so
    far.
    """

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int,
        n: int,
        texts: list[str],
        *,
        echo: bool = False,
        logprobs: bool = False,
        include_usage: bool = False,
        running: RunningUsage | None = None,
    ) -> None:
        """``texts``: each prompt's text (what ``echo`` repeats)."""
        self._base = {
            "id": response_id,
            "object": "text_completion",
            "created": created,
            "model": model,
        }
        #: A chunk's fields in order, ``choices`` (and ``usage``) to be set: copying a ready
        #: dict costs less than building one per chunk.
        self._template: dict[str, Any] = self._base | {"choices": None}
        if include_usage or running is not None:
            self._template["usage"] = None
        self._n = n
        self._texts = texts
        self._echo = echo
        self._logprobs = logprobs
        self._include_usage = include_usage
        self._running = running
        self._text: dict[int, list[str]] = {}
        self._lps: dict[int, list[TokenLogprob]] = {}
        self._ends: dict[int, ChoiceEnd] = {}
        self._usage = Usage(0, 0)

    # -- streaming -------------------------------------------------------------------------------

    def opening(self, prompt_index: int) -> list[dict[str, Any]]:
        """With ``echo``: the prompt's text as the first chunk of each of its choices."""
        if not self._echo:
            return []
        first = prompt_index * self._n
        text = self._texts[prompt_index]
        return [self._chunk(index, text, None, None) for index in range(first, first + self._n)]

    def stream(self, events: list[Event]) -> list[dict[str, Any]]:
        """Chunks for one batch of events (possibly none)."""
        chunks = []
        running = self._running
        for event in events:
            if isinstance(event, ChoiceDelta):
                if running is not None:
                    running.note(event)
                if event.content or event.logprobs:
                    lps = openai_logprobs(event.logprobs or [], 0) if self._logprobs else None
                    chunks.append(self._chunk(event.index, event.content, lps, None))
            elif isinstance(event, ChoiceEnd):
                if running is not None:
                    running.note(event)
                chunk = self._chunk(event.index, "", None, event.finish_reason)
                chunk["choices"][0]["matched_stop"] = event.matched_stop
                chunks.append(chunk)
            else:
                add_usage(self._usage, event)
        return chunks

    def closing(self) -> list[dict[str, Any]]:
        """With ``include_usage``: the usage of every prompt, in a chunk without choices."""
        if not self._include_usage:
            return []
        return [self._base | {"choices": [], "usage": usage_dict(self._usage)}]

    async def complete(self) -> None:
        """Nothing is kept."""

    def _chunk(
        self, index: int, text: str, logprobs: dict[str, Any] | None, finish: str | None
    ) -> dict[str, Any]:
        chunk = self._template.copy()
        chunk["choices"] = [
            {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish}
        ]
        if self._running is not None:
            chunk["usage"] = self._running.of(index)
        return chunk

    # -- one-shot --------------------------------------------------------------------------------

    def fold(self, events: list[Event]) -> None:
        """Fold one batch of events into the response."""
        for event in events:
            if isinstance(event, ChoiceDelta):
                self._text.setdefault(event.index, []).append(event.content)
                if event.logprobs:
                    self._lps.setdefault(event.index, []).extend(event.logprobs)
            elif isinstance(event, ChoiceEnd):
                self._ends[event.index] = event
            else:
                add_usage(self._usage, event)

    def answer(self) -> dict[str, Any]:
        """The complete ``text_completion`` object."""
        choices = []
        for i in range(len(self._texts) * self._n):
            text = "".join(self._text.get(i, []))
            prompt = self._texts[i // self._n]
            if self._echo:
                text = prompt + text
            end = self._ends.get(i)
            logprobs = None
            if self._logprobs:
                logprobs = openai_logprobs(self._lps.get(i, []), len(prompt) if self._echo else 0)
            choices.append(
                {
                    "index": i,
                    "text": text,
                    "logprobs": logprobs,
                    "finish_reason": end.finish_reason if end else "abort",
                    "matched_stop": end.matched_stop if end else None,
                }
            )
        return self._base | {"choices": choices, "usage": usage_dict(self._usage)}
