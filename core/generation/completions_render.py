"""OpenAI text completion output: SSE chunks from events, or one response folded from them."""

from __future__ import annotations

from typing import Any

from turnout.generation.chunk_template import chunk_template
from turnout.generation.events import (
    ChoiceDelta,
    ChoiceEnd,
    Event,
    PromptLogprobs,
    TokenLogprob,
    Usage,
)
from turnout.generation.prompt_logprobs import vllm_prompt_logprobs
from turnout.generation.usage import RunningUsage, add_usage, usage_dict


def openai_logprobs(entries: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """OpenAI's completions ``logprobs`` object; ``offset``: where the first token's text
    starts in the choice's text. Each ``top_logprobs`` object holds the sampled token too (so
    up to ``logprobs + 1`` entries, as OpenAI documents; one with ``logprobs: 0``); a prompt's
    first token (echo) has ``null`` for both."""
    tokens, values, offsets = [], [], []
    tops: list[dict[str, Any] | None] = []
    for lp in entries:
        tokens.append(lp.token)
        values.append(lp.logprob)
        if lp.logprob is None:
            tops.append(None)
        else:
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

    With ``echo`` each choice starts with its prompt's text (with ``logprobs``, its tokens'
    logprobs come first too). Streaming with ``include_usage``, the usage comes in a last chunk
    of its own; with ``running`` every chunk carries the usage so far. ``prompt_ids`` (vLLM's
    ``return_token_ids``): each choice carries its prompt's token ids and its own;
    ``prompt_logprobs``: each choice carries vLLM's ``prompt_logprobs``.
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
        prompt_ids: list[list[int]] | None = None,
        prompt_logprobs: bool = False,
    ) -> None:
        """``texts``: each prompt's text (what ``echo`` repeats)."""
        with_usage = include_usage or running is not None
        self._base, self._template = chunk_template(
            "text_completion", response_id, created, model, usage=with_usage
        )
        self._n = n
        self._texts = texts
        self._echo = echo
        self._logprobs = logprobs
        self._include_usage = include_usage
        self._running = running
        self._prompt_ids = prompt_ids
        self._prompt_logprobs = prompt_logprobs
        #: Streaming echo with logprobs: the prompts whose echo went out (it waits for the
        #: prompt's logprobs, which come with its first events).
        self._echoed: set[int] = set()
        self._text: dict[int, list[str]] = {}
        self._ids: dict[int, list[int]] = {}
        self._lps: dict[int, list[TokenLogprob]] = {}
        self._prompt_lps: dict[int, list[TokenLogprob]] = {}
        self._ends: dict[int, ChoiceEnd] = {}
        self._usage = Usage(0, 0)

    # -- streaming -------------------------------------------------------------------------------

    def opening(self, prompt_index: int) -> list[dict[str, Any]]:
        """With ``echo``: the prompt's text as the first chunk of each of its choices (with
        ``logprobs``, it waits for the prompt's logprobs); with ``prompt_ids``, a first chunk
        carrying them."""
        if self._echo and self._logprobs:
            return []
        if not self._echo and self._prompt_ids is None:
            return []
        return self._echo_chunks(prompt_index, None)

    def _echo_chunks(
        self, prompt_index: int, tokens: list[TokenLogprob] | None
    ) -> list[dict[str, Any]]:
        """The first chunk of each choice of a prompt: its echo (and logprobs), its ids."""
        self._echoed.add(prompt_index)
        first = prompt_index * self._n
        text = self._texts[prompt_index] if self._echo else ""
        lps = openai_logprobs(tokens, 0) if tokens is not None else None
        chunks = []
        for index in range(first, first + self._n):
            chunk = self._chunk(index, text, lps, None)
            if self._prompt_ids is not None:
                chunk["choices"][0]["prompt_token_ids"] = self._prompt_ids[prompt_index]
            chunks.append(chunk)
        return chunks

    def stream(self, events: list[Event]) -> list[dict[str, Any]]:
        """Chunks for one batch of events (possibly none)."""
        chunks = []
        running = self._running
        waiting = self._echo and self._logprobs
        for event in events:
            if isinstance(event, ChoiceDelta):
                if waiting and event.index // self._n not in self._echoed:
                    chunks.extend(self._echo_chunks(event.index // self._n, None))
                if running is not None:
                    running.note(event)
                if event.content or event.logprobs or event.token_ids:
                    lps = openai_logprobs(event.logprobs or [], 0) if self._logprobs else None
                    chunk = self._chunk(event.index, event.content, lps, None)
                    if self._prompt_ids is not None:
                        chunk["choices"][0]["token_ids"] = event.token_ids or []
                    chunks.append(chunk)
            elif isinstance(event, ChoiceEnd):
                if running is not None:
                    running.note(event)
                chunk = self._chunk(event.index, "", None, event.finish_reason)
                chunk["choices"][0]["matched_stop"] = event.matched_stop
                chunks.append(chunk)
            elif isinstance(event, PromptLogprobs):
                if waiting and event.prompt_index not in self._echoed:
                    chunks.extend(self._echo_chunks(event.prompt_index, event.tokens))
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
                if event.token_ids:
                    self._ids.setdefault(event.index, []).extend(event.token_ids)
            elif isinstance(event, ChoiceEnd):
                self._ends[event.index] = event
            elif isinstance(event, PromptLogprobs):
                self._prompt_lps[event.prompt_index] = event.tokens
            else:
                add_usage(self._usage, event)

    def answer(self) -> dict[str, Any]:
        """The complete ``text_completion`` object."""
        choices = []
        for i in range(len(self._texts) * self._n):
            k = i // self._n
            text = "".join(self._text.get(i, []))
            prompt = self._texts[k]
            if self._echo:
                text = prompt + text
            end = self._ends.get(i)
            logprobs = None
            if self._logprobs:
                entries = self._lps.get(i, [])
                if self._echo:
                    entries = [*self._prompt_lps.get(k, []), *entries]
                logprobs = openai_logprobs(entries, 0)
                if self._echo and k not in self._prompt_lps:  # no prompt logprobs came
                    logprobs["text_offset"] = [o + len(prompt) for o in logprobs["text_offset"]]
            choice: dict[str, Any] = {
                "index": i,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": end.finish_reason if end else "abort",
                "matched_stop": end.matched_stop if end else None,
            }
            if self._prompt_ids is not None:
                choice["prompt_token_ids"] = self._prompt_ids[k]
                choice["token_ids"] = self._ids.get(i, [])
            if self._prompt_logprobs:
                choice["prompt_logprobs"] = vllm_prompt_logprobs(self._prompt_lps.get(k, []))
            choices.append(choice)
        return self._base | {"choices": choices, "usage": usage_dict(self._usage)}
