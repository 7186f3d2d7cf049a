"""SGLang's ``/generate`` output: ``{text, output_ids, meta_info, index}`` per choice, streamed
(each chunk carries the choice's output so far) or folded."""

from __future__ import annotations

import time
from typing import Any

from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage


class _Output:
    """One choice's output so far."""

    __slots__ = ("end", "ids", "lps", "reasoning", "text", "tops", "wanted")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.ids: list[int] = []
        #: SGLang's logprob entries of the tokens, and of each token's alternatives.
        self.lps: list[list[Any]] = []
        self.tops: list[list[list[Any]]] = []
        #: Per token, SGLang's entries of the token ids the request asked about.
        self.wanted: list[list[list[Any]]] = []
        self.end: ChoiceEnd | None = None
        #: Its reasoning tokens so far.
        self.reasoning = 0


class GenerateRenderer:
    """Builds SGLang's result objects from the events of ``n`` choices per prompt (choice
    ``k * n + i`` answers prompt ``k``); the answer is a list when the request was a batch or
    ``n > 1``, else the one object."""

    __slots__ = (
        "_count",
        "_ended",
        "_logprobs",
        "_n",
        "_one",
        "_outputs",
        "_prompt_tokens",
        "_rid",
        "_started",
        "_top",
        "_usage",
        "_wanted",
        "_with_text",
    )

    def __init__(
        self,
        rid: str,
        n: int,
        prompts: int,
        *,
        batch: bool = False,
        logprobs: bool = False,
        top_logprobs: bool = False,
        wanted_logprobs: bool = False,
        text_in_logprobs: bool = False,
        started: float | None = None,
        prompt_tokens: list[int] | None = None,
    ) -> None:
        """``rid``: the request id (``<rid>-<i>`` per choice when there are several);
        ``started``: when the request arrived (``time.monotonic``), for ``e2e_latency``;
        ``prompt_tokens``: each prompt's length, reported in every chunk before the worker's
        count arrives with the last."""
        self._rid, self._n = rid, n
        self._prompt_tokens = prompt_tokens or [0] * prompts
        self._started = time.monotonic() if started is None else started
        self._logprobs = logprobs
        self._top = top_logprobs
        self._wanted = wanted_logprobs
        self._with_text = text_in_logprobs
        self._count = n * prompts
        #: The answer is the one object (not a list).
        self._one = not batch and n == 1
        # (No comprehension for the usual one choice: it would cost a call of its own.)
        self._outputs = [_Output()] if self._count == 1 else [_Output() for _ in range(self._count)]
        self._usage: dict[int, Usage] = {}
        #: Choices that ended and wait for their prompt's usage (their final chunk's counts).
        self._ended: list[int] = []

    # -- streaming -------------------------------------------------------------------------------

    def opening(self, prompt_index: int) -> list[dict[str, Any]]:
        """Nothing before a prompt's output."""
        return []

    def stream(self, events: list[Event]) -> list[dict[str, Any]]:
        """One chunk per choice the batch touched (its output so far); a choice's final chunk
        goes out once its prompt's usage arrived (after the ends), with the counts."""
        touched: dict[int, None] = {}
        finals: list[int] = []
        for event in events:
            self._take(event)
            if isinstance(event, ChoiceEnd):
                self._ended.append(event.index)
            elif isinstance(event, Usage):
                finals.extend(self._ended)
                self._ended.clear()
            elif isinstance(event, ChoiceDelta):
                touched[event.index] = None
        chunks = [self._result(i, final=False) for i in touched if i not in finals]
        chunks.extend(self._result(i, final=True) for i in finals)
        return chunks

    def closing(self) -> list[dict[str, Any]]:
        """Nothing after the last prompt."""
        return []

    async def complete(self) -> None:
        """Nothing is kept."""

    # -- one-shot --------------------------------------------------------------------------------

    def fold(self, events: list[Event]) -> None:
        """Fold one batch of events into the results."""
        for event in events:
            self._take(event)

    def answer(self) -> list[dict[str, Any]] | dict[str, Any]:
        """The results: a list for a batch or ``n > 1``, else the one result."""
        if self._one and self._count == 1:
            return self._result(0, final=True)
        results = [self._result(i, final=True) for i in range(self._count)]
        return results[0] if self._one else results

    # -- shared ----------------------------------------------------------------------------------

    def _take(self, event: Event) -> None:
        if isinstance(event, ChoiceDelta):
            out = self._outputs[event.index]
            out.text.append(event.content)
            out.reasoning = event.reasoning_tokens
            if event.token_ids:
                out.ids.extend(event.token_ids)
            if event.logprobs and self._logprobs:
                entry = self._entry
                for lp in event.logprobs:
                    out.lps.append(entry(lp))
                    if self._top:
                        out.tops.append([entry(top) for top in lp.top])
                    if self._wanted:
                        out.wanted.append([entry(w) for w in lp.wanted])
        elif isinstance(event, ChoiceEnd):
            self._outputs[event.index].end = event
        elif isinstance(event, Usage):
            self._usage[event.prompt_index] = event

    def _result(self, i: int, final: bool) -> dict[str, Any]:
        out = self._outputs[i]
        end = out.end if final else None
        usage = self._usage.get(i // self._n)
        meta: dict[str, Any] = {
            "id": self._rid if self._count == 1 else f"{self._rid}-{i}",
            "finish_reason": None if end is None else _finish_reason(end),
            "prompt_tokens": usage.prompt_tokens if usage else self._prompt_tokens[i // self._n],
            "completion_tokens": len(out.ids) if end is None else end.completion_tokens,
            "cached_tokens": usage.cached_tokens if usage else 0,
            "e2e_latency": time.monotonic() - self._started,
        }
        if end is not None:
            meta["matched_stop"] = end.matched_stop
        meta["reasoning_tokens"] = out.reasoning if end is None else end.reasoning_tokens
        if self._logprobs:
            meta["output_token_logprobs"] = out.lps
            if self._top:
                meta["output_top_logprobs"] = out.tops
            if self._wanted:
                meta["output_token_ids_logprobs"] = out.wanted
        return {"text": "".join(out.text), "output_ids": out.ids, "meta_info": meta, "index": i}

    def _entry(self, lp: TokenLogprob) -> list[Any]:
        """SGLang's ``[logprob, token_id, text or null]``."""
        return [lp.logprob, lp.token_id, lp.token if self._with_text else None]


def _finish_reason(end: ChoiceEnd) -> dict[str, Any]:
    if end.finish_reason == "length":
        return {"type": "length", "length": end.completion_tokens}
    reason: dict[str, Any] = {"type": end.finish_reason}
    if end.matched_stop is not None:
        reason["matched"] = end.matched_stop
    return reason
