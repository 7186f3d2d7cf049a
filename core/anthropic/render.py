"""The Messages API's output: Anthropic's typed stream events from the generation events, and
the message folded from the very same events.

Content blocks follow the events of the one choice, in order: reasoning opens a ``thinking``
block, text a ``text`` block, each tool call a ``tool_use`` block; a block ends when one of
another kind starts. Each streams as ``content_block_start``, its ``content_block_delta``
events (``thinking_delta``, ``text_delta``, ``input_json_delta``) and ``content_block_stop``,
between ``message_start`` + ``ping`` and ``message_delta`` (stop reason, usage) +
``message_stop``. A generation the worker aborted ends with an ``error`` event instead (a
one-shot answer is then an error).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from turnout.anthropic.errors import error_body
from turnout.errors import ApiError
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, ToolCallPiece, Usage

_ABORTED = "the worker aborted the generation"


def usage_object(usage: Usage | None, input_tokens: int) -> dict[str, Any]:
    """Anthropic's ``usage``: input tokens read from the prefix cache are counted apart
    (``cache_read_input_tokens``), as Anthropic does; ``input_tokens`` is the rest."""
    if usage is None:
        return {
            "input_tokens": input_tokens,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
    }


@dataclass(slots=True)
class _Block:
    """The content block being written."""

    block: dict[str, Any]
    index: int
    #: Its text, thinking or a call's JSON input, in pieces.
    pieces: list[str]
    call_index: int = -1


class MessagesRenderer:
    """Streams a message's typed events, or folds them into the message object.

    ``message`` is the message as it starts (no content, no stop reason); ``input_tokens``
    the prompt's length (``message_start`` tells it before the worker's count comes);
    ``stop_sequences`` the request's; ``show_thinking`` False leaves thinking blocks empty
    (``thinking.display: omitted``).
    """

    def __init__(
        self,
        message: dict[str, Any],
        *,
        input_tokens: int,
        stop_sequences: list[str] | None = None,
        show_thinking: bool = True,
    ) -> None:
        self._message = message
        self._input_tokens = input_tokens
        self._stops = frozenset(stop_sequences or ())
        self._show_thinking = show_thinking
        self._content: list[dict[str, Any]] = []
        self._current: _Block | None = None
        self._end: ChoiceEnd | None = None
        self._usage: Usage | None = None
        self._finished = False

    # -- streaming -------------------------------------------------------------------------------

    def opening(self, prompt_index: int) -> list[dict[str, Any]]:
        """``message_start`` (with the prompt's length as its usage), then a ``ping``."""
        start = {**self._message, "usage": usage_object(None, self._input_tokens)}
        return [{"type": "message_start", "message": start}, {"type": "ping"}]

    def stream(self, events: list[Event]) -> list[dict[str, Any]]:
        """The typed events of one batch of events."""
        out: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, ChoiceDelta):
                if event.reasoning:
                    self._thinking(event.reasoning, out)
                if event.content:
                    self._text(event.content, out)
                for piece in event.tool_calls:
                    self._call(piece, out)
            elif isinstance(event, ChoiceEnd):
                self._end = event
                self._close(out)
            elif isinstance(event, Usage):
                self._usage = event
        return out

    async def complete(self) -> None:
        """Finish the message."""
        self._finish()

    def closing(self) -> list[dict[str, Any]]:
        """``message_delta`` and ``message_stop``; an ``error`` event when the worker aborted."""
        self._finish()
        message = self._message
        if message["stop_reason"] is None:
            return [error_body(ApiError(500, _ABORTED))]
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
        return [
            {"type": "message_delta", "delta": delta, "usage": message["usage"]},
            {"type": "message_stop"},
        ]

    # -- one-shot --------------------------------------------------------------------------------

    def fold(self, events: list[Event]) -> None:
        """Take one batch of events into the message (the stream's events, unsent)."""
        self.stream(events)

    def answer(self) -> dict[str, Any]:
        """The message object (an error when the worker aborted)."""
        self._finish()
        if self._message["stop_reason"] is None:
            raise ApiError(500, _ABORTED)
        return self._message

    # -- blocks ----------------------------------------------------------------------------------

    def _start(self, block: dict[str, Any], out: list[dict[str, Any]]) -> _Block:
        self._close(out)
        opened = self._current = _Block(block, len(self._content), [])
        self._content.append(block)
        out.append(
            {"type": "content_block_start", "index": opened.index, "content_block": dict(block)}
        )
        return opened

    def _delta(self, opened: _Block, delta: dict[str, Any], out: list[dict[str, Any]]) -> None:
        out.append({"type": "content_block_delta", "index": opened.index, "delta": delta})

    def _thinking(self, text: str, out: list[dict[str, Any]]) -> None:
        opened = self._current
        if opened is None or opened.block["type"] != "thinking":
            opened = self._start({"type": "thinking", "thinking": "", "signature": ""}, out)
        if self._show_thinking:
            opened.pieces.append(text)
            self._delta(opened, {"type": "thinking_delta", "thinking": text}, out)

    def _text(self, text: str, out: list[dict[str, Any]]) -> None:
        opened = self._current
        if opened is None or opened.block["type"] != "text":
            opened = self._start({"type": "text", "text": ""}, out)
        opened.pieces.append(text)
        self._delta(opened, {"type": "text_delta", "text": text}, out)

    def _call(self, piece: ToolCallPiece, out: list[dict[str, Any]]) -> None:
        opened = self._current
        if piece.name is not None:
            block: dict[str, Any] = {
                "type": "tool_use",
                "id": piece.id,
                "name": piece.name,
                "input": {},
            }
            opened = self._start(block, out)
            opened.call_index = piece.index
        elif opened is None or opened.call_index != piece.index:
            return  # a parser's pieces of one call follow its first one (with the name)
        if piece.arguments:
            opened.pieces.append(piece.arguments)
            self._delta(opened, {"type": "input_json_delta", "partial_json": piece.arguments}, out)

    def _close(self, out: list[dict[str, Any]]) -> None:
        """Finish the open block: its final form, ``content_block_stop``."""
        opened, self._current = self._current, None
        if opened is None:
            return
        block = opened.block
        text = "".join(opened.pieces)
        kind = block["type"]
        if kind == "text":
            block["text"] = text
        elif kind == "thinking":
            block["thinking"] = text
        else:
            block["input"] = _call_input(text)
        out.append({"type": "content_block_stop", "index": opened.index})

    def _finish(self) -> None:
        """The message's content, stop reason and usage (once)."""
        if self._finished:
            return
        self._finished = True
        self._close([])
        message = self._message
        message["content"] = self._content
        message["usage"] = usage_object(self._usage, self._input_tokens)
        end = self._end
        if end is None or end.finish_reason == "abort":
            return
        if end.finish_reason == "length":
            message["stop_reason"] = "max_tokens"
        elif end.finish_reason == "tool_calls":
            message["stop_reason"] = "tool_use"
        elif isinstance(end.matched_stop, str) and end.matched_stop in self._stops:
            message["stop_reason"] = "stop_sequence"
            message["stop_sequence"] = end.matched_stop
        else:
            message["stop_reason"] = "end_turn"


def _call_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as its ``input`` object (a call without arguments takes none)."""
    if not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
