"""The Responses API's output: OpenAI's typed stream events from the generation events, and the
response object folded from the very same events.

Output items follow the events of the one choice: reasoning opens a ``reasoning`` item, text a
``message`` item (one ``output_text`` part), each tool call a ``function_call`` item. The
message stays open until the choice ends: text after a call joins it, so an output reads as
reasoning, message, calls however the worker chunked it (a parser reports text and the calls
it read in one step without their order). Other items are done when the next one starts. Each
item streams as ``response.output_item.added``, (``response.content_part.added``), its deltas, their
``….done`` event, (``response.content_part.done``) and ``response.output_item.done``, between
``response.created`` + ``response.in_progress`` and the last event: ``response.completed``,
``response.incomplete`` (the token limit ended it) or ``response.failed``. Every event has a
``sequence_number``, counting from 0.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from turnout.generation.chat_render import logprob_entry
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, ToolCallPiece, Usage
from turnout.responses.items import Item, new_id

#: Keeps a finished response (the endpoint's store), or None.
Keeper = Callable[[dict[str, Any]], Awaitable[None]]


def usage_object(usage: Usage) -> dict[str, Any]:
    """The Responses API's ``usage`` object."""
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }


@dataclass(slots=True)
class OpenItem:
    """The output item being written."""

    item: Item
    output_index: int
    #: Its text (a message's or the reasoning's) or a call's arguments, in pieces.
    pieces: list[str]
    logprobs: list[dict[str, Any]] | None = None


class ResponsesRenderer:
    """Streams a response's typed events, or folds them into the response object.

    ``response`` is the response object as it starts (``status: in_progress``, no output, no
    usage); the renderer fills in its output, usage and status. ``keep``, when given, keeps
    the finished response (before its last event goes out).
    """

    def __init__(
        self,
        response: dict[str, Any],
        *,
        logprobs: bool = False,
        keep: Keeper | None = None,
        seal: Callable[[str], str] | None = None,
    ) -> None:
        self._response = response
        self._logprobs = logprobs
        self._keep = keep
        self._seal = seal
        self._sequence = 0
        self._output: list[Item] = []
        #: The message item (open until the choice ends) and the reasoning or call item being
        #: written.
        self._message: OpenItem | None = None
        self._current: OpenItem | None = None
        #: Function call items by the call's index in the choice.
        self._calls: dict[int, OpenItem] = {}
        self._end: ChoiceEnd | None = None
        self._usage: Usage | None = None
        self._finished = False

    # -- streaming -------------------------------------------------------------------------------

    def opening(self, prompt_index: int) -> list[dict[str, Any]]:
        """``response.created`` and ``response.in_progress``."""
        return [
            self._event("response.created", response=self._snapshot()),
            self._event("response.in_progress", response=self._snapshot()),
        ]

    def stream(self, events: list[Event]) -> list[dict[str, Any]]:
        """The typed events of one batch of events."""
        out: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, ChoiceDelta):
                if event.reasoning:
                    self._reasoning(event.reasoning, out)
                if event.content:
                    self._text(event, out)
                for piece in event.tool_calls:
                    self._call(piece, out)
            elif isinstance(event, ChoiceEnd):
                self._end = event
                self._close_all(out)
            elif isinstance(event, Usage):
                self._usage = event
        return out

    async def complete(self) -> None:
        """Finish the response, and keep it."""
        self._finish()
        if self._keep is not None:
            await self._keep(self._response)

    def closing(self) -> list[dict[str, Any]]:
        """The last event: the whole response as it ended."""
        self._finish()
        status = self._response["status"]
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}
        return [self._event(kind.get(status, "response.failed"), response=self._response)]

    # -- one-shot --------------------------------------------------------------------------------

    def fold(self, events: list[Event]) -> None:
        """Take one batch of events into the response (the stream's events, unsent)."""
        self.stream(events)

    def answer(self) -> dict[str, Any]:
        """The response object."""
        self._finish()
        return self._response

    # -- items -----------------------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    def _snapshot(self) -> dict[str, Any]:
        return {**self._response, "output": [dict(item) for item in self._output]}

    def _start(self, item: Item, out: list[dict[str, Any]]) -> OpenItem:
        opened = OpenItem(item, len(self._output), [])
        self._output.append(item)
        out.append(
            self._event(
                "response.output_item.added", output_index=opened.output_index, item=dict(item)
            )
        )
        return opened

    def _part_event(self, kind: str, opened: OpenItem, part: Item) -> dict[str, Any]:
        return self._event(
            kind,
            item_id=opened.item["id"],
            output_index=opened.output_index,
            content_index=0,
            part=part,
        )

    def _reasoning(self, text: str, out: list[dict[str, Any]]) -> None:
        opened = self._current
        if opened is None or opened.item["type"] != "reasoning":
            self._close_all(out)
            item = {
                "id": new_id("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
            opened = self._current = self._start(item, out)
            part = {"type": "reasoning_text", "text": ""}
            out.append(self._part_event("response.content_part.added", opened, part))
        opened.pieces.append(text)
        out.append(
            self._event(
                "response.reasoning_text.delta",
                item_id=opened.item["id"],
                output_index=opened.output_index,
                content_index=0,
                delta=text,
            )
        )

    def _text(self, event: ChoiceDelta, out: list[dict[str, Any]]) -> None:
        opened = self._message
        if opened is None:
            if self._current is not None and self._current.item["type"] == "reasoning":
                self._close(self._current, out)
                self._current = None
            item = {
                "id": new_id("msg"),
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            opened = self._message = self._start(item, out)
            opened.logprobs = [] if self._logprobs else None
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self._part_event("response.content_part.added", opened, part))
        logprobs: list[dict[str, Any]] = []
        if event.logprobs and opened.logprobs is not None:
            logprobs = [logprob_entry(lp) for lp in event.logprobs]
            opened.logprobs.extend(logprobs)
        opened.pieces.append(event.content)
        out.append(
            self._event(
                "response.output_text.delta",
                item_id=opened.item["id"],
                output_index=opened.output_index,
                content_index=0,
                delta=event.content,
                logprobs=logprobs,
            )
        )

    def _call(self, piece: ToolCallPiece, out: list[dict[str, Any]]) -> None:
        if piece.name is not None:
            item = {
                "id": new_id("fc"),
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": piece.id,
                "name": piece.name,
            }
            self._close(self._current, out)
            opened = self._current = self._start(item, out)
            self._calls[piece.index] = opened
        else:
            found = self._calls.get(piece.index)
            if found is None:  # a parser's pieces always start with the name
                return
            opened = found
        if piece.arguments:
            opened.pieces.append(piece.arguments)
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=opened.item["id"],
                    output_index=opened.output_index,
                    delta=piece.arguments,
                )
            )

    def _close_all(self, out: list[dict[str, Any]]) -> None:
        """Finish the open items, in output order."""
        open_items = [o for o in (self._message, self._current) if o is not None]
        self._message = self._current = None
        for opened in sorted(open_items, key=lambda o: o.output_index):
            self._close(opened, out)

    def _close(self, opened: OpenItem | None, out: list[dict[str, Any]]) -> None:
        """Finish an item: its done events, its final form."""
        if opened is None:
            return
        item = opened.item
        text = "".join(opened.pieces)
        truncated = self._end is not None and self._end.finish_reason == "length"
        item["status"] = "incomplete" if truncated else "completed"
        where = {"item_id": item["id"], "output_index": opened.output_index}
        if item["type"] == "message":
            part = {
                "type": "output_text",
                "text": text,
                "annotations": [],
                "logprobs": opened.logprobs or [],
            }
            out.append(
                self._event(
                    "response.output_text.done",
                    **where,
                    content_index=0,
                    text=text,
                    logprobs=opened.logprobs or [],
                )
            )
            out.append(self._part_event("response.content_part.done", opened, part))
            item["content"] = [part]
        elif item["type"] == "reasoning":
            part = {"type": "reasoning_text", "text": text}
            out.append(
                self._event("response.reasoning_text.done", **where, content_index=0, text=text)
            )
            out.append(self._part_event("response.content_part.done", opened, part))
            item["content"] = [part]
            if self._seal is not None:
                item["encrypted_content"] = self._seal(text)
        else:
            item["arguments"] = text
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    **where,
                    name=item["name"],
                    arguments=text,
                )
            )
        out.append(
            self._event(
                "response.output_item.done", output_index=opened.output_index, item=dict(item)
            )
        )

    def _finish(self) -> None:
        """The response's final status, output and usage (once)."""
        if self._finished:
            return
        self._finished = True
        self._close_all([])
        response = self._response
        response["output"] = self._output
        end = self._end
        if end is None or end.finish_reason == "abort":
            response["status"] = "failed"
            response["error"] = {
                "code": "server_error",
                "message": "the worker aborted the generation",
            }
        elif end.finish_reason == "length":
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            response["status"] = "completed"
            response["completed_at"] = int(time.time())
        if self._usage is not None:
            response["usage"] = usage_object(self._usage)
