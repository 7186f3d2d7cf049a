"""OpenAI chat completion output: SSE chunks from events, or one response folded from them."""

from __future__ import annotations

from typing import Any

from turnout.generation.chunk_template import chunk_template
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage
from turnout.generation.prompt_logprobs import vllm_prompt_logprobs
from turnout.generation.usage import RunningUsage, usage_dict


def logprob_entry(lp: TokenLogprob) -> dict[str, Any]:
    """One OpenAI chat logprobs ``content`` entry (``bytes``: the token's real bytes)."""
    return {
        "token": lp.token,
        "logprob": lp.logprob,
        "bytes": list(lp.raw),
        "top_logprobs": [
            {"token": top.token, "logprob": top.logprob, "bytes": list(top.raw)} for top in lp.top
        ],
    }


class ChatRenderer:
    """Streams ``chat.completion.chunk`` objects in OpenAI's order, or folds one
    ``chat.completion``, from the events of ``n`` choices.

    Streaming with ``include_usage``, every chunk has ``usage: null`` but the last one, which
    carries the usage; with ``running`` (``continuous_usage_stats``) every chunk carries the usage
    so far. Without ``stream_reasoning`` (SGLang), a choice's reasoning is held back and goes out
    in one piece with its first content or tool call, or at its end. vLLM's extensions: ``echo``
    starts each choice's content; ``prompt_ids`` (``return_token_ids``) puts the prompt's token
    ids in the answer (the first chunks) and each choice's in its message (its chunks);
    ``prompt_logprobs`` puts the prompt's logprobs in the one-shot answer.
    """

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int,
        n: int,
        *,
        include_usage: bool = False,
        running: RunningUsage | None = None,
        stream_reasoning: bool = True,
        echo: str = "",
        prompt_ids: list[int] | None = None,
        prompt_logprobs: bool = False,
    ) -> None:
        self._id, self._model, self._created, self._n = response_id, model, created, n
        with_usage = include_usage or running is not None
        self._base, self._template = chunk_template(
            "chat.completion.chunk", response_id, created, model, usage=with_usage
        )
        self._include_usage = include_usage
        self._running = running
        self._held: dict[int, str] | None = None if stream_reasoning else {}
        self._echo = echo
        self._prompt_ids = prompt_ids
        self._prompt_logprobs = prompt_logprobs
        #: A delta of content alone becomes its chunk directly (no running usage to add, no
        #: reasoning to hold back, no token ids to show).
        self._direct = running is None and stream_reasoning and prompt_ids is None
        #: The one-shot answer's parts, made by the first :meth:`fold`: a stream, which may
        #: wait a long time between its batches, keeps no lists it never fills.
        self._folded: _Folded | None = None

    # -- streaming -------------------------------------------------------------------------------

    def opening(self, prompt_index: int) -> list[dict[str, Any]]:
        """The first chunk of each choice: the assistant role (and the echo, the prompt's ids)."""
        chunks = [
            self._chunk(
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": self._echo, "refusal": None},
                    "logprobs": None,
                    "finish_reason": None,
                }
            )
            for i in range(self._n)
        ]
        if self._prompt_ids is not None:
            for chunk in chunks:
                chunk["prompt_token_ids"] = self._prompt_ids
        return chunks

    def stream(self, events: list[Event]) -> list[dict[str, Any]]:
        """Chunks for one batch of events (possibly none)."""
        chunks: list[dict[str, Any]] = []
        running = self._running
        direct = self._direct
        for event in events:
            if isinstance(event, ChoiceDelta):
                if (
                    direct
                    and event.content
                    and not (event.reasoning or event.tool_calls or event.logprobs is not None)
                ):  # a delta of content alone: what _delta_choice and _chunk make of it
                    chunk = self._template.copy()
                    chunk["choices"] = [
                        {
                            "index": event.index,
                            "delta": {"content": event.content},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ]
                    chunks.append(chunk)
                    continue
                if running is not None:
                    running.note(event)
                self._delta_chunk(event, chunks)
            elif isinstance(event, ChoiceEnd):
                if running is not None:
                    running.note(event)
                self._end_chunks(event, chunks)
            elif isinstance(event, Usage) and self._include_usage:
                chunks.append(self._base | {"choices": [], "usage": usage_dict(event)})
        return chunks

    def closing(self) -> list[dict[str, Any]]:
        """Nothing: the usage chunk goes out with the last events."""
        return []

    async def complete(self) -> None:
        """Nothing is kept."""

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        chunk = self._template.copy()
        chunk["choices"] = [choice]
        if self._running is not None:
            chunk["usage"] = self._running.of(choice["index"])
        return chunk

    def _delta_chunk(self, event: ChoiceDelta, chunks: list[dict[str, Any]]) -> None:
        reasoning = event.reasoning
        held = self._held
        if held is not None:
            reasoning = held.pop(event.index, "") + reasoning
            if reasoning and not (event.content or event.tool_calls):
                held[event.index] = reasoning
                reasoning = ""
        choice = _delta_choice(event, reasoning)
        if self._prompt_ids is not None:
            choice["token_ids"] = event.token_ids or []
        if choice["delta"] or choice["logprobs"] or event.token_ids:
            chunks.append(self._chunk(choice))

    def _end_chunks(self, event: ChoiceEnd, chunks: list[dict[str, Any]]) -> None:
        held = self._held.pop(event.index, "") if self._held is not None else ""
        if held:
            chunks.append(self._chunk(_delta_choice(ChoiceDelta(event.index), held)))
        end: dict[str, Any] = {
            "index": event.index,
            "delta": {},
            "logprobs": None,
            "finish_reason": event.finish_reason,
            "matched_stop": event.matched_stop,
        }
        chunks.append(self._chunk(end))

    # -- one-shot --------------------------------------------------------------------------------

    def fold(self, events: list[Event]) -> None:
        """Fold one batch of events into the response."""
        folded = self._folded
        if folded is None:
            folded = self._folded = _Folded(self._n)
        for event in events:
            if isinstance(event, ChoiceDelta):
                folded.delta(event)
            elif isinstance(event, ChoiceEnd):
                folded.ends[event.index] = event
            elif isinstance(event, Usage):
                folded.usage = usage_dict(event)
            else:
                folded.prompt_logprobs = event.tokens

    def answer(self) -> dict[str, Any]:
        """The complete ``chat.completion`` object."""
        folded = self._folded or _Folded(self._n)
        choices = []
        for i, parts in enumerate(folded.content):
            content = self._echo + "".join(parts)
            calls = [folded.calls[i][k] for k in sorted(folded.calls[i])]
            message: dict[str, Any] = {
                "role": "assistant",
                "content": content if content or not calls else None,
                "refusal": None,
            }
            reasoning = "".join(folded.reasoning[i])
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = calls
            end = folded.ends.get(i)
            entries = folded.logprobs[i]
            choice: dict[str, Any] = {
                "index": i,
                "message": message,
                "logprobs": None if entries is None else {"content": entries, "refusal": None},
                "finish_reason": end.finish_reason if end else "abort",
                "matched_stop": end.matched_stop if end else None,
            }
            if self._prompt_ids is not None:
                choice["token_ids"] = folded.token_ids[i]
            choices.append(choice)
        body: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }
        if folded.usage is not None:
            body["usage"] = folded.usage
        if self._prompt_ids is not None:
            body["prompt_token_ids"] = self._prompt_ids
        if self._prompt_logprobs:
            body["prompt_logprobs"] = vllm_prompt_logprobs(folded.prompt_logprobs)
        return body


class _Folded:
    """The parts of a one-shot answer, per choice."""

    __slots__ = (
        "calls",
        "content",
        "ends",
        "logprobs",
        "prompt_logprobs",
        "reasoning",
        "token_ids",
        "usage",
    )

    def __init__(self, n: int) -> None:
        self.content: list[list[str]] = [[] for _ in range(n)]
        self.reasoning: list[list[str]] = [[] for _ in range(n)]
        self.calls: list[dict[int, dict[str, Any]]] = [{} for _ in range(n)]
        self.logprobs: list[list[dict[str, Any]] | None] = [None] * n
        self.ends: dict[int, ChoiceEnd] = {}
        self.usage: dict[str, Any] | None = None
        self.token_ids: list[list[int]] = [[] for _ in range(n)]
        self.prompt_logprobs: list[TokenLogprob] = []

    def delta(self, event: ChoiceDelta) -> None:
        i = event.index
        if event.content:
            self.content[i].append(event.content)
        if event.reasoning:
            self.reasoning[i].append(event.reasoning)
        for piece in event.tool_calls:
            call = self.calls[i].setdefault(
                piece.index,
                {"id": piece.id, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if piece.name is not None:
                call["id"] = piece.id
                call["function"]["name"] = piece.name
            call["function"]["arguments"] += piece.arguments
        if event.token_ids:
            self.token_ids[i].extend(event.token_ids)
        if event.logprobs is not None:
            entries = self.logprobs[i] or []
            entries.extend(logprob_entry(lp) for lp in event.logprobs)
            self.logprobs[i] = entries


def _delta_choice(event: ChoiceDelta, reasoning: str) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if reasoning:
        delta["reasoning_content"] = reasoning
    if event.content:
        delta["content"] = event.content
    if event.tool_calls:
        calls = []
        for piece in event.tool_calls:
            call: dict[str, Any] = {"index": piece.index}
            function: dict[str, Any] = {"arguments": piece.arguments}
            if piece.name is not None:
                call["id"] = piece.id
                call["type"] = "function"
                function["name"] = piece.name
            call["function"] = function
            calls.append(call)
        delta["tool_calls"] = calls
    logprobs = None
    if event.logprobs is not None:
        logprobs = {"content": [logprob_entry(lp) for lp in event.logprobs], "refusal": None}
    return {"index": event.index, "delta": delta, "logprobs": logprobs, "finish_reason": None}
