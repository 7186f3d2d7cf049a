"""OpenAI chat completion output: SSE chunks from events, or one response folded from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage
from turnout.generation.requests import StreamOptions


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


def usage_dict(usage: Usage) -> dict[str, Any]:
    """OpenAI ``usage`` object."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


class RunningUsage:
    """Token counts so far, for ``stream_options.continuous_usage_stats``: like SGLang and
    vLLM, a chunk of a choice carries its prompt's tokens and that choice's tokens so far."""

    __slots__ = ("_choices", "_n", "_prompts")

    def __init__(self, prompt_tokens: Sequence[int], n: int) -> None:
        """``prompt_tokens``: per prompt; choice ``i`` answers prompt ``i // n``."""
        self._prompts = list(prompt_tokens)
        self._n = n
        self._choices: dict[int, int] = {}

    def note(self, index: int, event: Event) -> None:
        """Take the counts an event of choice ``index`` carries."""
        if isinstance(event, ChoiceDelta | ChoiceEnd):
            self._choices[index] = event.completion_tokens

    def of(self, index: int) -> dict[str, int]:
        """The ``usage`` object of a chunk of choice ``index``."""
        prompt = self._prompts[index // self._n]
        completion = self._choices.get(index, 0)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }


def running_usage(
    options: StreamOptions | None, prompt_tokens: Sequence[int], n: int
) -> RunningUsage | None:
    """The usage so far to report in every chunk, when the client asked for it."""
    if options is None or not options.continuous_usage_stats:
        return None
    return RunningUsage(prompt_tokens, n)


class ChatStream:
    """Turns events into ``chat.completion.chunk`` objects, in OpenAI's order.

    With ``include_usage`` every chunk has ``usage: null`` but the last one, which carries the
    usage; with ``running`` (``continuous_usage_stats``) every chunk carries the usage so far.
    """

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int,
        *,
        include_usage: bool,
        running: RunningUsage | None = None,
        stream_reasoning: bool = True,
    ) -> None:
        self._base = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        self._include_usage = include_usage
        self._running = running
        #: Reasoning held per choice when it goes out in one piece (``stream_reasoning: false``,
        #: SGLang): with the first content or tool call, or at the end.
        self._held: dict[int, str] | None = None if stream_reasoning else {}

    def _chunk(self, choice: dict[str, Any]) -> dict[str, Any]:
        chunk = self._base | {"choices": [choice]}
        if self._running is not None:
            chunk["usage"] = self._running.of(choice["index"])
        elif self._include_usage:
            chunk["usage"] = None
        return chunk

    def role_chunks(self, n: int) -> list[dict[str, Any]]:
        """The first chunk of each choice: the assistant role."""
        return [
            self._chunk(
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": "", "refusal": None},
                    "logprobs": None,
                    "finish_reason": None,
                }
            )
            for i in range(n)
        ]

    def chunks(self, event: Event) -> list[dict[str, Any]]:
        """Chunks for one event (possibly none)."""
        if self._running is not None and not isinstance(event, Usage):
            self._running.note(event.index, event)
        if isinstance(event, ChoiceDelta):
            reasoning = event.reasoning
            if self._held is not None:
                reasoning = self._held.pop(event.index, "") + reasoning
                if reasoning and not (event.content or event.tool_calls):
                    self._held[event.index] = reasoning
                    reasoning = ""
            choice = self._delta_choice(event, reasoning)
            if not (choice["delta"] or choice["logprobs"]):
                return []
            return [self._chunk(choice)]
        if isinstance(event, ChoiceEnd):
            chunks = []
            held = self._held.pop(event.index, "") if self._held is not None else ""
            if held:
                chunks.append(self._chunk(self._delta_choice(ChoiceDelta(event.index), held)))
            end: dict[str, Any] = {
                "index": event.index,
                "delta": {},
                "logprobs": None,
                "finish_reason": event.finish_reason,
                "matched_stop": event.matched_stop,
            }
            chunks.append(self._chunk(end))
            return chunks
        if self._include_usage:
            return [self._base | {"choices": [], "usage": usage_dict(event)}]
        return []

    @staticmethod
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


class ChatFolder:
    """Folds the event stream into one ``chat.completion`` response."""

    def __init__(self, response_id: str, model: str, created: int, n: int) -> None:
        self._id, self._model, self._created = response_id, model, created
        self._content: list[list[str]] = [[] for _ in range(n)]
        self._reasoning: list[list[str]] = [[] for _ in range(n)]
        self._calls: list[dict[int, dict[str, Any]]] = [{} for _ in range(n)]
        self._logprobs: list[list[dict[str, Any]] | None] = [None] * n
        self._ends: dict[int, ChoiceEnd] = {}
        self._usage: Usage | None = None

    def add(self, event: Event) -> None:
        """Fold one event."""
        if isinstance(event, ChoiceDelta):
            i = event.index
            if event.content:
                self._content[i].append(event.content)
            if event.reasoning:
                self._reasoning[i].append(event.reasoning)
            for piece in event.tool_calls:
                call = self._calls[i].setdefault(
                    piece.index,
                    {"id": piece.id, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                if piece.name is not None:
                    call["id"] = piece.id
                    call["function"]["name"] = piece.name
                call["function"]["arguments"] += piece.arguments
            if event.logprobs is not None:
                entries = self._logprobs[i] or []
                entries.extend(logprob_entry(lp) for lp in event.logprobs)
                self._logprobs[i] = entries
        elif isinstance(event, ChoiceEnd):
            self._ends[event.index] = event
        else:
            self._usage = event

    def response(self) -> dict[str, Any]:
        """The complete response object."""
        choices = []
        for i, parts in enumerate(self._content):
            content = "".join(parts)
            calls = [self._calls[i][k] for k in sorted(self._calls[i])]
            message: dict[str, Any] = {
                "role": "assistant",
                "content": content if content or not calls else None,
                "refusal": None,
            }
            reasoning = "".join(self._reasoning[i])
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = calls
            end = self._ends.get(i)
            entries = self._logprobs[i]
            choice: dict[str, Any] = {
                "index": i,
                "message": message,
                "logprobs": None if entries is None else {"content": entries, "refusal": None},
                "finish_reason": end.finish_reason if end else "abort",
                "matched_stop": end.matched_stop if end else None,
            }
            choices.append(choice)
        body: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion",
            "created": self._created,
            "model": self._model,
            "choices": choices,
        }
        if self._usage is not None:
            body["usage"] = usage_dict(self._usage)
        return body
