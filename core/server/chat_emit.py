"""OpenAI chat completion output: SSE chunks from events, or one response folded from them."""

from __future__ import annotations

from typing import Any

from turnout.server.events import ChoiceDelta, ChoiceEnd, Event, TokenLogprob, Usage


def logprob_entry(lp: TokenLogprob) -> dict[str, Any]:
    """One OpenAI chat logprobs ``content`` entry."""
    return {
        "token": lp.token,
        "logprob": lp.logprob,
        "bytes": list(lp.token.encode("utf-8")),
        "top_logprobs": [
            {"token": tok, "logprob": value, "bytes": list(tok.encode("utf-8"))}
            for _, tok, value in lp.top
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


class ChatStream:
    """Turns events into ``chat.completion.chunk`` objects, in OpenAI's order."""

    def __init__(self, response_id: str, model: str, created: int, include_usage: bool) -> None:
        self._base = {
            "id": response_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        self._include_usage = include_usage

    def _chunk(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return self._base | {"choices": choices}

    def role_chunks(self, n: int) -> list[dict[str, Any]]:
        """The first chunk of each choice: the assistant role."""
        return [
            self._chunk(
                [
                    {
                        "index": i,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ]
            )
            for i in range(n)
        ]

    def chunks(self, event: Event) -> list[dict[str, Any]]:
        """Chunks for one event (possibly none)."""
        if isinstance(event, ChoiceDelta):
            return [self._chunk([self._delta_choice(event)])]
        if isinstance(event, ChoiceEnd):
            choice: dict[str, Any] = {
                "index": event.index,
                "delta": {},
                "logprobs": None,
                "finish_reason": event.finish_reason,
            }
            if event.matched_stop is not None:
                choice["matched_stop"] = event.matched_stop
            return [self._chunk([choice])]
        if self._include_usage:
            return [self._chunk([]) | {"usage": usage_dict(event)}]
        return []

    @staticmethod
    def _delta_choice(event: ChoiceDelta) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        if event.reasoning:
            delta["reasoning_content"] = event.reasoning
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
            logprobs = {"content": [logprob_entry(lp) for lp in event.logprobs]}
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
            }
            reasoning = "".join(self._reasoning[i])
            if reasoning:
                message["reasoning_content"] = reasoning
            if calls:
                message["tool_calls"] = calls
            end = self._ends.get(i)
            choice: dict[str, Any] = {
                "index": i,
                "message": message,
                "logprobs": None if self._logprobs[i] is None else {"content": self._logprobs[i]},
                "finish_reason": end.finish_reason if end else "abort",
            }
            if end is not None and end.matched_stop is not None:
                choice["matched_stop"] = end.matched_stop
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
