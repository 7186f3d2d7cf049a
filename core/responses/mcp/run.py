"""A response with MCP tools: several generations on the one flow, and the router's calls of
the MCP servers between them, as one stream of typed events.

1. Before anything is sent: every server is checked (allowed host, allowed addresses: a 400
   ``mcp_server_not_allowed`` otherwise) and the context is read, as for any response.
2. The servers' tools are listed (``mcp_list_tools`` items; a server listed by a kept
   response this one follows is not listed again), and the calls the client approved
   (``mcp_approval_response`` input items) are made.
3. Generations follow, each a run of the one flow with the MCP tools as function tools: a
   generation whose calls are all MCP calls the router may make is followed by their calls
   (``mcp_call`` items) and the next generation. The response ends with a generation that
   calls no MCP tool, with approval requests, with calls of the client's own functions, or
   after ``mcp.max_tool_rounds`` rounds of calls (the last generation then sees no MCP tool).

A one-shot answer is the fold of the very same stream: its last event's response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from turnout.config import McpConfig
from turnout.errors import ApiError, bad_request
from turnout.generation.context import RequestContext
from turnout.generation.flow import Backend, Endpoint, Folded, Generated, Streamed, run_endpoint
from turnout.generation.models import ModelRuntime
from turnout.generation.plan import Plan
from turnout.responses.items import Item
from turnout.responses.mcp.render import Events, McpRenderer, McpTool
from turnout.responses.mcp.servers import (
    ListedTool,
    McpFailure,
    allowed_addresses,
    is_mcp,
    operator_server,
    request_servers,
)
from turnout.responses.request import ResponsesRequest

if TYPE_CHECKING:
    from turnout.responses.mcp.client import McpClient

log = logging.getLogger(__name__)

#: Builds one generation's plan: (request, context items, runtime, ctx) → plan.
Planner = Callable[[ResponsesRequest, list[Item], ModelRuntime, RequestContext], Awaitable[Plan]]


@dataclass(slots=True)
class McpResponse:
    """What one response with MCP tools works with."""

    request: ResponsesRequest
    ctx: RequestContext
    backend: Backend
    renderer: McpRenderer
    #: The kept items it follows, then its input items.
    context: list[Item]
    clients: dict[str, McpClient]
    config: McpConfig
    planner: Planner
    tools: dict[str, McpTool] = field(default_factory=dict)


async def mcp_clients(
    request: ResponsesRequest, config: McpConfig, model_id: str
) -> dict[str, McpClient]:
    """A client per MCP server of the request, by label (the 400s of a server that may not
    be reached)."""
    servers = request_servers(request.tools or [])
    try:  # the SDK is an extra: only requests with MCP tools need it
        from turnout.responses.mcp.client import McpClient
    except ImportError:
        raise ApiError(
            400,
            "MCP tools need the mcp SDK on the router (pip install 'turnout[mcp]')",
            param="tools",
            code="mcp_unavailable",
        ) from None
    clients = {}
    positions = [i for i, tool in enumerate(request.tools or []) if is_mcp(tool)]
    for server, i in zip(servers, positions, strict=True):
        operator = not server.url
        chosen = operator_server(server, config, model_id, f"tools[{i}]") if operator else server
        param = f"tools[{i}].server_url"
        try:
            async with asyncio.timeout(config.call_timeout_s):  # name resolution, too
                addresses = await allowed_addresses(chosen, config, param, operator=operator)
        except TimeoutError:
            raise ApiError(
                400,
                f"the host of MCP server {server.label!r} could not be resolved in time",
                param=param,
                code="mcp_server_unresolvable",
            ) from None
        clients[server.label] = McpClient(
            chosen, addresses, config.call_timeout_s, config.max_result_bytes
        )
    return clients


def mcp_config(backend: Backend) -> McpConfig:
    """The ``mcp`` section of the router's config (the defaults without one: none allowed)."""
    config = getattr(getattr(backend, "config", None), "mcp", None)
    return config if isinstance(config, McpConfig) else McpConfig()


async def run_mcp(response: McpResponse) -> Generated:
    """The answer: the event stream, or its fold (the last event's response)."""
    _check_approvals(response.context)
    events = _events(response)
    if response.request.streams:
        return Streamed(events, typed_events=True)
    last: Events = []
    try:
        async for batch in events:
            last = batch or last
    finally:
        await events.aclose()
    return Folded(last[-1]["response"])


async def _events(response: McpResponse) -> AsyncGenerator[Events, None]:
    renderer = response.renderer
    yield renderer.opening(0)
    async for batch in _list_tools(response):
        yield batch
    async for batch in _approved_calls(response):
        yield batch
    rounds = max(1, response.config.max_tool_rounds)
    budget = response.request.max_tool_calls
    calls = 0
    for round_index in range(rounds + 1):
        last = round_index == rounds or (budget is not None and calls >= budget)
        renderer.tools = {} if last else response.tools
        async for batch in _generation(response, round_index, last):
            yield batch
        pending = renderer.pending
        for opened in pending:
            if budget is not None and calls >= budget:
                yield renderer.called(opened, None, _over_budget(budget))
                continue
            yield await _call(response, opened.item["server_label"], opened)
            calls += 1
        if not pending or renderer.asked_approval or renderer.called_functions:
            break  # the answer, or what the client answers first
        renderer.next_generation()
    await renderer.complete()
    yield renderer.closing()


async def _generation(response: McpResponse, round_index: int, last: bool) -> AsyncIterator[Events]:
    """One generation on the one flow, its events through the response's renderer."""
    request = response.request
    tools = [tool for tool in request.tools or [] if not is_mcp(tool)]
    if not last:
        tools += [_function_tool(tool) for tool in response.tools.values()]
    context = [*response.context, *response.renderer.output]
    # The tool choice holds for the first generation: later ones answer with what it found.
    choice = _tool_choice(request.tool_choice, response.tools) if round_index == 0 else None
    round_request = msgspec.structs.replace(
        request, tools=tools or None, tool_choice=choice if tools else None, stream=True
    )

    async def prompts(r: ResponsesRequest, runtime: ModelRuntime, ctx: RequestContext) -> Plan:
        plan = await response.planner(r, context, runtime, ctx)
        if round_index:
            plan.request_id = f"{ctx.worker_request_id}-{round_index}"
        return plan

    endpoint = Endpoint(
        ResponsesRequest,
        check=lambda r: None,
        prompts=prompts,
        renderer=lambda r, p, c: _Generation(response.renderer),
        typed_events=True,
    )
    generated = await run_endpoint(endpoint, round_request, response.ctx, response.backend)
    assert isinstance(generated, Streamed)
    payloads = generated.payloads
    try:
        async for batch in payloads:
            yield batch
    finally:
        await payloads.aclose()


def _tool_choice(
    choice: str | dict[str, Any] | None, tools: dict[str, McpTool]
) -> str | dict[str, Any] | None:
    """The tool choice as the chat path reads it: ``{"type": "mcp", "server_label", "name"}``
    is the function of that name, or any tool of that server."""
    if not isinstance(choice, dict) or choice.get("type") != "mcp":
        return choice
    name = choice.get("name")
    if isinstance(name, str) and name:
        return {"type": "function", "name": name}
    label = choice.get("server_label")
    names = [name for name, tool in tools.items() if tool.server.label == label]
    return {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": name} for name in names],
    }


def _function_tool(tool: McpTool) -> dict[str, Any]:
    described = tool.tool.description or f"A tool of MCP server {tool.server.label!r}"
    return {
        "type": "function",
        "name": tool.tool.name,
        "description": described,
        "parameters": tool.tool.input_schema or {"type": "object", "properties": {}},
    }


class _Generation:
    """One generation's renderer: the response's, without the response's start and end."""

    def __init__(self, renderer: McpRenderer) -> None:
        self._renderer = renderer

    def opening(self, prompt_index: int) -> list[Any]:
        return []

    def stream(self, events: list[Any]) -> list[Any]:
        return self._renderer.stream(events)

    def closing(self) -> list[Any]:
        return []

    async def complete(self) -> None:
        return None

    def fold(self, events: list[Any]) -> None:
        self._renderer.stream(events)

    def answer(self) -> Any:
        return None


async def _list_tools(response: McpResponse) -> AsyncIterator[Events]:
    """List each server's tools (unless the context lists them already)."""
    known = _listed_before(response.context)
    for label, client in response.clients.items():
        tools = known.get(label)
        if tools is None:
            opened, events = response.renderer.listing(client.server)
            yield events
            try:
                found = await client.list_tools()
            except McpFailure as exc:
                yield response.renderer.listed(opened, None, str(exc))
                continue
            tools = _shown(found, client, response.config)
            yield response.renderer.listed(opened, tools, None)
        for tool in _shown(tools, client, response.config):
            if tool.name in response.tools:
                log.info("MCP tool %r of %r hidden: another server has it", tool.name, label)
                continue
            response.tools[tool.name] = McpTool(client.server, tool)


def _shown(tools: list[ListedTool], client: McpClient, config: McpConfig) -> list[ListedTool]:
    """The tools of a server the model may see."""
    shown = [tool for tool in tools if client.server.allows(tool.name, tool.annotations)]
    return shown[: config.max_tools]


def _listed_before(items: Sequence[Item]) -> dict[str, list[ListedTool]]:
    """The tools the context's ``mcp_list_tools`` items list, by server label."""
    listed: dict[str, list[ListedTool]] = {}
    for item in items:
        if item["type"] == "mcp_list_tools" and not item.get("error"):
            listed[item["server_label"]] = [
                ListedTool(
                    tool["name"],
                    tool.get("description"),
                    tool.get("input_schema") or {},
                    tool.get("annotations"),
                )
                for tool in item.get("tools") or []
            ]
    return listed


async def _approved_calls(response: McpResponse) -> AsyncIterator[Events]:
    """Make the calls the client approved in this request's input."""
    requests = {
        item["id"]: item for item in response.context if item["type"] == "mcp_approval_request"
    }
    answered = {
        item["approval_request_id"]
        for item in response.context
        if item["type"] == "mcp_call" and item.get("approval_request_id")
    }
    for item in response.context:
        if item["type"] != "mcp_approval_response" or not item["approve"]:
            continue
        request_id = item["approval_request_id"]
        if request_id in answered:
            continue
        asked = requests[request_id]  # there is one (_check_approvals)
        client = response.clients.get(asked["server_label"])
        tool = response.tools.get(asked["name"])
        if client is None or tool is None:
            raise bad_request(
                f"approval request {request_id!r} calls {asked['name']!r} on MCP server "
                f"{asked['server_label']!r}, which the request's tools do not offer",
                "tools",
            )
        answered.add(request_id)
        opened, events = response.renderer.approved(tool, asked["arguments"], request_id)
        yield events
        yield await _call(response, client.server.label, opened)


async def _call(response: McpResponse, label: str, opened: Any) -> Events:
    """Call the tool of an ``mcp_call`` item; its end events."""
    item = opened.item
    client = response.clients[label]
    try:
        output = await client.call(item["name"], item["arguments"])
    except McpFailure as exc:
        return response.renderer.called(opened, None, exc.error)
    return response.renderer.called(opened, output, None)


def _over_budget(budget: int) -> dict[str, Any]:
    return {
        "type": "mcp_protocol_error",
        "code": -32600,
        "message": f"not called: the response made max_tool_calls ({budget}) calls already",
    }


def _check_approvals(context: Sequence[Item]) -> None:
    """Each approval the client sends answers an approval request of the context (a 400
    before anything is streamed otherwise)."""
    asked = {item["id"] for item in context if item["type"] == "mcp_approval_request"}
    for item in context:
        if item["type"] == "mcp_approval_response" and item["approval_request_id"] not in asked:
            raise ApiError(
                400,
                f"mcp_approval_response answers {item['approval_request_id']!r}, which is no "
                "approval request of the context (send it, or previous_response_id)",
                param="input",
                code="mcp_approval_request_not_found",
            )


def check_approval_input(items: Sequence[Item]) -> None:
    """Approval responses need the request's MCP tools (a 400 otherwise)."""
    for i, item in enumerate(items):
        if item["type"] == "mcp_approval_response":
            raise ApiError(
                400,
                "an mcp_approval_response needs the request's mcp tools (send them again)",
                param=f"input[{i}]",
                code="mcp_tools_missing",
            )
