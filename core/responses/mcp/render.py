"""The Responses renderer of a response with MCP tools: the same typed events, over several
generations, with OpenAI's MCP items.

A call the model makes of an MCP tool becomes an ``mcp_call`` item (``mcp_call.in_progress``,
its ``mcp_call_arguments`` deltas and ``done``; ``mcp_call.completed`` or ``failed`` and
``output_item.done`` once the router called the server), or an ``mcp_approval_request`` item
when the tool needs the client's approval. Listing a server's tools is an ``mcp_list_tools``
item (``mcp_list_tools.in_progress``, then ``completed`` or ``failed``). Generations follow
each other in one response: the output, sequence numbers and usage run on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnout.generation.events import ToolCallPiece, Usage
from turnout.responses.items import Item, new_id
from turnout.responses.mcp.servers import ListedTool, McpServer
from turnout.responses.render import OpenItem, ResponsesRenderer

Events = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class McpTool:
    """A tool the model sees, and the server it is on."""

    server: McpServer
    tool: ListedTool

    @property
    def needs_approval(self) -> bool:
        """Whether a call waits for the client's approval."""
        return self.server.needs_approval(self.tool.name, self.tool.annotations)


class McpRenderer(ResponsesRenderer):
    """A :class:`ResponsesRenderer` that renders calls of MCP tools as MCP items."""

    def __init__(self, response: dict[str, Any], **options: Any) -> None:
        super().__init__(response, **options)
        #: The MCP tools of the generation being rendered, by name.
        self.tools: Mapping[str, McpTool] = {}
        #: The ``mcp_call`` items of this generation whose arguments are done, in order.
        self.pending: list[OpenItem] = []
        self._spent: list[Usage] = []

    # -- generations -----------------------------------------------------------------------------

    def next_generation(self) -> None:
        """Start rendering the next generation of the response."""
        if self._usage is not None:
            self._spent.append(self._usage)
        self._usage = None
        self._end = None
        self._calls = {}
        self.pending = []

    @property
    def output(self) -> list[Item]:
        """The output items so far."""
        return self._output

    @property
    def asked_approval(self) -> bool:
        """Whether the output holds approval requests (the response ends with them)."""
        return any(item["type"] == "mcp_approval_request" for item in self._output)

    @property
    def called_functions(self) -> bool:
        """Whether the last generation called the client's own functions."""
        return any(opened.item["type"] == "function_call" for opened in self._calls.values())

    def _finish(self) -> None:
        if not self._finished and self._spent:
            spent = [*self._spent, *([self._usage] if self._usage is not None else [])]
            self._usage = Usage(
                prompt_tokens=sum(u.prompt_tokens for u in spent),
                completion_tokens=sum(u.completion_tokens for u in spent),
                cached_tokens=sum(u.cached_tokens for u in spent),
                reasoning_tokens=sum(u.reasoning_tokens for u in spent),
            )
        super()._finish()

    # -- list tools ------------------------------------------------------------------------------

    def listing(self, server: McpServer) -> tuple[OpenItem, Events]:
        """An ``mcp_list_tools`` item starts."""
        out: Events = []
        item: Item = {"id": new_id("mcpl"), "type": "mcp_list_tools"}
        item["server_label"] = server.label
        item["tools"] = []
        opened = self._start(item, out)
        out.append(self._about(opened, "response.mcp_list_tools.in_progress"))
        return opened, out

    def listed(self, opened: OpenItem, tools: list[ListedTool] | None, error: str | None) -> Events:
        """The ``mcp_list_tools`` item ends: with the tools, or with an error."""
        item = opened.item
        item["tools"] = [tool.item() for tool in tools or []]
        if error is not None:
            item["error"] = error
        kind = "failed" if error is not None else "completed"
        return [
            self._about(opened, f"response.mcp_list_tools.{kind}"),
            self._done(opened),
        ]

    # -- calls -----------------------------------------------------------------------------------

    def approved(self, tool: McpTool, arguments: str, request_id: str) -> tuple[OpenItem, Events]:
        """An ``mcp_call`` item for a call the client approved (its arguments whole)."""
        out: Events = []
        opened = self._start(self._call_item(tool, request_id), out)
        out.append(self._about(opened, "response.mcp_call.in_progress"))
        opened.pieces.append(arguments)
        out.append(self._arguments_delta(opened, arguments))
        self._close(opened, out)
        self.pending = [waiting for waiting in self.pending if waiting is not opened]
        return opened, out

    def called(self, opened: OpenItem, output: str | None, error: dict[str, Any] | None) -> Events:
        """An ``mcp_call`` item ends: with the tool's output, or with an error."""
        item = opened.item
        item["output"] = output
        item["error"] = error
        item["status"] = "failed" if error is not None else "completed"
        kind = "failed" if error is not None else "completed"
        return [self._about(opened, f"response.mcp_call.{kind}"), self._done(opened)]

    def _call(self, piece: ToolCallPiece, out: list[dict[str, Any]]) -> None:
        tool = self.tools.get(piece.name) if piece.name is not None else None
        if tool is None:
            found = self._calls.get(piece.index)
            if piece.name is None and found is not None and found.item["type"] != "function_call":
                if piece.arguments:
                    found.pieces.append(piece.arguments)
                    if found.item["type"] == "mcp_call":
                        out.append(self._arguments_delta(found, piece.arguments))
                return
            super()._call(piece, out)
            return
        self._close(self._current, out)
        if tool.needs_approval:
            item = {
                "id": new_id("mcpr"),
                "type": "mcp_approval_request",
                "server_label": tool.server.label,
                "name": tool.tool.name,
                "arguments": "",
            }
            opened = self._current = self._start(item, out)
        else:
            opened = self._current = self._start(self._call_item(tool, None), out)
            out.append(self._about(opened, "response.mcp_call.in_progress"))
        self._calls[piece.index] = opened
        if piece.arguments:
            opened.pieces.append(piece.arguments)
            if item_is_call(opened.item):
                out.append(self._arguments_delta(opened, piece.arguments))

    def _close(self, opened: OpenItem | None, out: list[dict[str, Any]]) -> None:
        if opened is None:
            return
        item = opened.item
        if item["type"] == "mcp_call":
            if any(waiting is opened for waiting in self.pending):
                return
            item["arguments"] = "".join(opened.pieces)
            where = {"item_id": item["id"], "output_index": opened.output_index}
            out.append(
                self._event(
                    "response.mcp_call_arguments.done", **where, arguments=item["arguments"]
                )
            )
            self.pending.append(opened)
        elif item["type"] == "mcp_approval_request":
            item["arguments"] = "".join(opened.pieces)
            out.append(self._done(opened))
        else:
            super()._close(opened, out)

    # -- events ----------------------------------------------------------------------------------

    @staticmethod
    def _call_item(tool: McpTool, approval_request_id: str | None) -> Item:
        return {
            "id": new_id("mcp"),
            "type": "mcp_call",
            "status": "in_progress",
            "server_label": tool.server.label,
            "name": tool.tool.name,
            "arguments": "",
            "output": None,
            "error": None,
            "approval_request_id": approval_request_id,
        }

    def _about(self, opened: OpenItem, kind: str) -> dict[str, Any]:
        return self._event(kind, item_id=opened.item["id"], output_index=opened.output_index)

    def _arguments_delta(self, opened: OpenItem, delta: str) -> dict[str, Any]:
        return self._event(
            "response.mcp_call_arguments.delta",
            item_id=opened.item["id"],
            output_index=opened.output_index,
            delta=delta,
        )

    def _done(self, opened: OpenItem) -> dict[str, Any]:
        return self._event(
            "response.output_item.done", output_index=opened.output_index, item=dict(opened.item)
        )


def item_is_call(item: Item) -> bool:
    """Whether an item is an ``mcp_call`` (whose arguments stream)."""
    return bool(item["type"] == "mcp_call")
