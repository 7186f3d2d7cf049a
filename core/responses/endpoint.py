"""``POST /v1/responses`` on the one flow: the prompt builder and the renderer.

The prompt builder reads the input items (after the kept items of ``previous_response_id``, or
the items of the ``conversation``), makes them chat messages and hands a chat request to the
chat endpoint's own check and prompt builder: the chat template, tools and ``tool_choice``, the
reasoning parser, the JSON-schema constraint and sampling are the chat path's, not a copy of
it. The renderer streams typed events and, with ``store``, keeps the finished response (and
adds its items to its ``conversation``) before its last event goes out.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from turnout.errors import ApiError, bad_request
from turnout.generation import chat
from turnout.generation.context import RequestContext
from turnout.generation.flow import Backend, Endpoint, Generated
from turnout.generation.models import ModelRuntime, UnknownAdapter
from turnout.generation.plan import Plan
from turnout.generation.requests import ChatCompletionRequest, ChatMessage
from turnout.responses.conversations import ConversationStore, find_conversation
from turnout.responses.items import Item, chat_messages, input_items, new_id
from turnout.responses.mcp.render import McpRenderer
from turnout.responses.mcp.run import (
    McpResponse,
    check_approval_input,
    mcp_clients,
    mcp_config,
    run_mcp,
)
from turnout.responses.mcp.servers import echoed_mcp_tool, is_mcp
from turnout.responses.render import Keeper, ResponsesRenderer
from turnout.responses.request import ResponsesRequest, check_request
from turnout.responses.sealing import ReasoningSeal
from turnout.responses.store import (
    ResponseStore,
    StoredResponse,
    current_owner,
    find_item,
    find_kept,
)

log = logging.getLogger(__name__)

#: Chat request fields → the Responses request's names (errors name what the client sent).
_FIELD_NAMES = {
    "response_format": "text.format",
    "max_completion_tokens": "max_output_tokens",
    "reasoning_effort": "reasoning.effort",
    "messages": "input",
}
_MESSAGE_PARAM = re.compile(r"messages\[(\d+)\](.*)")


@dataclass(frozen=True, slots=True)
class _Context:
    """What the prompt builder hands the renderer."""

    response_id: str
    #: Every item the response is generated from (kept with it).
    items: list[Item]
    #: The tenant of the request (see :func:`~turnout.responses.store.current_owner`).
    tenant: str | None
    #: The conversation the response belongs to, and what it adds to it besides its output:
    #: the input items.
    conversation: str | None = None
    added: tuple[Item, ...] = ()


class ResponsesApi:
    """The Responses API of one app: the endpoint, on the app's response and conversation
    stores."""

    def __init__(
        self,
        store: ResponseStore,
        conversations: ConversationStore,
        seal: ReasoningSeal | None = None,
    ) -> None:
        self.store = store
        self.conversations = conversations
        self.seal = seal or ReasoningSeal()
        self.endpoint = Endpoint(
            ResponsesRequest,
            check=check_request,
            prompts=self._prompts,
            renderer=self._renderer,
            description="Create a model response (OpenAI's Responses API), streamed as typed "
            "events or as one JSON body.",
            typed_events=True,
            runner=self._run_mcp,
        )

    async def previous(self, response_id: str) -> StoredResponse:
        """The kept response a request follows (404 when it is not kept)."""
        stored = await find_kept(self.store, response_id)
        if stored is None:
            raise ApiError(
                404,
                f"previous response {response_id!r} not found",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        status = stored.response.get("status")
        if status in ("queued", "in_progress"):  # a background response: no answer to follow
            raise bad_request(
                f"previous response {response_id!r} has not finished (it is {status}): "
                "follow it once it has",
                "previous_response_id",
            )
        return stored

    async def conversation_items(self, conversation_id: str) -> list[Item]:
        """The items of the conversation a request belongs to (404 when it is not kept)."""
        head = await find_conversation(self.conversations, conversation_id)
        found = None if head is None else await self.conversations.items(conversation_id)
        if found is None:
            raise ApiError(
                404,
                f"conversation {conversation_id!r} not found",
                param="conversation",
                code="conversation_not_found",
            )
        return found

    async def _context(self, request: ResponsesRequest) -> tuple[list[Item], list[Item]]:
        """The kept items a request follows (``previous_response_id`` or its
        ``conversation``), and its input items."""
        history: list[Item] = []
        if request.previous_response_id is not None:
            history = (await self.previous(request.previous_response_id)).context()
        conversation = request.conversation_id
        if conversation is not None:
            history = await self.conversation_items(conversation)
        items = input_items(await self._dereferenced(request.input), self.seal.open)
        return history, items

    async def _plan(
        self,
        request: ResponsesRequest,
        history: Sequence[Item],
        items: Sequence[Item],
        runtime: ModelRuntime,
        ctx: RequestContext,
    ) -> Plan:
        """The chat path's plan for the context (cut to fit with ``truncation: auto``)."""
        try:
            return await self._chat_plan(request, history, items, runtime, ctx)
        except ApiError as exc:
            if request.truncation != "auto" or exc.code != "context_length_exceeded":
                raise
            return await self._truncated_plan(request, [*history, *items], runtime, ctx, exc)

    async def _prompts(
        self, request: ResponsesRequest, runtime: ModelRuntime, ctx: RequestContext
    ) -> Plan:
        history, items = await self._context(request)
        check_approval_input(items)
        plan = await self._plan(request, history, items, runtime, ctx)
        plan.endpoint_state = _Context(
            new_id("resp"),
            [*history, *items],
            current_owner(),
            request.conversation_id,
            tuple(items),
        )
        return plan

    async def _run_mcp(
        self, request: ResponsesRequest, ctx: RequestContext, backend: Backend
    ) -> Generated | None:
        """A request with MCP tools: generations and the router's calls in one response
        (:mod:`turnout.responses.mcp`); None for any other."""
        if not any(is_mcp(tool) for tool in request.tools or ()):
            return None
        check_request(request)
        config = mcp_config(backend)
        try:  # as the flow resolves it (an adapter's name, too)
            model_id = backend.models.resolve_model(request.model, None)[0]
        except UnknownAdapter:
            model_id = (await backend.models.resolve_model_fresh(request.model, None))[0]
        clients = await mcp_clients(request, config, model_id)
        history, items = await self._context(request)

        async def planner(
            r: ResponsesRequest, context: list[Item], runtime: ModelRuntime, c: RequestContext
        ) -> Plan:
            return await self._plan(r, context, [], runtime, c)

        state = _Context(
            new_id("resp"), [*history, *items], current_owner(), request.conversation_id,
            tuple(items),
        )  # fmt: skip
        response = response_object(request, state.response_id, model_id, ctx.created)
        if state.conversation is not None:
            response["conversation"] = {"id": state.conversation}
        renderer = McpRenderer(
            response,
            logprobs=request.logprobs,
            keep=self._keeper(request, state),
            seal=self.seal.seal if request.seals_reasoning else None,
        )
        return await run_mcp(
            McpResponse(request, ctx, backend, renderer, state.items, clients, config, planner)
        )

    async def _chat_plan(
        self,
        request: ResponsesRequest,
        history: Sequence[Item],
        items: Sequence[Item],
        runtime: ModelRuntime,
        ctx: RequestContext,
    ) -> Plan:
        """The chat path's plan for the context: kept ``history``, then the input ``items``."""
        conversation = chat_messages(request.instructions, history, items)
        if not conversation.messages:
            raise bad_request("input must not be empty", "input")
        chat_request = chat_request_of(request, conversation.messages)
        try:
            chat.ENDPOINT.check(chat_request)
            return await chat.ENDPOINT.prompts(chat_request, runtime, ctx)
        except ApiError as exc:
            exc.param = _param_name(exc.param, conversation.origins)
            raise

    async def _truncated_plan(
        self,
        request: ResponsesRequest,
        context: list[Item],
        runtime: ModelRuntime,
        ctx: RequestContext,
        too_long: ApiError,
    ) -> Plan:
        """``truncation: auto``: the plan of the longest tail of the context that fits (the
        oldest items dropped, as OpenAI does; the instructions stay). A binary search over
        how many items to drop: a few renders, however long the conversation."""
        fewest, most = 1, len(context) - 1
        fitting: Plan | None = None
        while fewest <= most:
            dropped = (fewest + most) // 2
            try:
                fitting = await self._chat_plan(request, [], _tail(context, dropped), runtime, ctx)
                most = dropped - 1
            except ApiError as exc:
                if exc.code != "context_length_exceeded":
                    raise
                fewest = dropped + 1
        if fitting is None:
            raise too_long
        return fitting

    async def _dereferenced(self, value: str | list[Any]) -> str | list[Any]:
        """The input with each ``item_reference`` replaced by the kept item it names (a 404
        when no response of this tenant kept it)."""
        if isinstance(value, str):
            return value
        out = list(value)
        for i, raw in enumerate(value):
            if not isinstance(raw, dict) or raw.get("type") != "item_reference":
                continue
            item_id = raw.get("id")
            if not isinstance(item_id, str) or not item_id:
                raise bad_request(f"input[{i}].id must be a non-empty string", f"input[{i}].id")
            found = await find_item(self.store, item_id)
            if found is None:
                raise ApiError(
                    404,
                    f"item {item_id!r} not found: item_reference names an item of a stored "
                    "response (store: true) of the same tenant",
                    param=f"input[{i}].id",
                    code="item_not_found",
                )
            out[i] = found
        return out

    def queued(self, request: ResponsesRequest, plan: Plan, ctx: RequestContext) -> StoredResponse:
        """The response a prepared background request makes, as it waits to run: what is
        stored when it is submitted."""
        context: _Context = plan.endpoint_state
        response = self._started(request, plan, ctx)
        response["status"] = "queued"
        return StoredResponse(response, context.items, context.tenant)

    def _started(self, request: ResponsesRequest, plan: Plan, ctx: RequestContext) -> Item:
        context: _Context = plan.endpoint_state
        response = response_object(request, context.response_id, plan.model_id, ctx.created)
        if context.conversation is not None:
            response["conversation"] = {"id": context.conversation}
        return response

    def _renderer(
        self, request: ResponsesRequest, plan: Plan, ctx: RequestContext
    ) -> ResponsesRenderer:
        context: _Context = plan.endpoint_state
        response = self._started(request, plan, ctx)
        seal = self.seal.seal if request.seals_reasoning else None
        keep = self._keeper(request, context)
        return ResponsesRenderer(response, logprobs=request.logprobs, keep=keep, seal=seal)

    def _keeper(self, request: ResponsesRequest, context: _Context) -> Keeper | None:
        """What keeps the finished response (its store, its conversation), if anything."""
        if not request.stores and context.conversation is None:
            return None
        store, conversations = self.store, self.conversations

        async def keep(finished: dict[str, Any]) -> None:
            if request.stores:
                try:
                    await store.put(StoredResponse(finished, context.items, context.tenant))
                except ApiError:
                    pass  # the store is unavailable (the answer stands): it warns
                except Exception as exc:  # the answer stands; only follow-ups miss it
                    log.warning("response %s could not be stored: %s", finished["id"], exc)
            conversation = context.conversation
            if conversation is not None and finished["status"] != "failed":
                added = [*context.added, *finished["output"]]
                await _add_to_conversation(conversations, conversation, added, finished["id"])

        return keep


async def _add_to_conversation(
    conversations: ConversationStore, conversation: str, items: list[Item], response_id: str
) -> None:
    """Add a finished response's input and output ``items`` to its conversation (a failure is
    logged: the answer stands)."""
    try:
        added = await conversations.append(conversation, items)
    except Exception as exc:
        log.warning(
            "response %s could not be added to conversation %s: %s", response_id, conversation, exc
        )
        return
    if not added:
        log.warning(
            "response %s was not added to conversation %s: it was deleted meanwhile",
            response_id,
            conversation,
        )


def _tail(context: Sequence[Item], dropped: int) -> list[Item]:
    """The context without its first ``dropped`` items, nor the call outputs that would then
    open it (their calls are gone)."""
    start = dropped
    while start < len(context) - 1 and context[start]["type"] == "function_call_output":
        start += 1
    return list(context[start:])


def chat_request_of(
    request: ResponsesRequest, messages: list[ChatMessage]
) -> ChatCompletionRequest:
    """The chat request the chat path builds the prompt of."""
    reasoning = request.reasoning or {}
    return ChatCompletionRequest(
        messages=messages,
        model=request.model,
        stream=request.streams,
        temperature=request.temperature,
        top_p=request.top_p,
        top_k=request.top_k,
        min_p=request.min_p,
        repetition_penalty=request.repetition_penalty,
        frequency_penalty=request.frequency_penalty,
        presence_penalty=request.presence_penalty,
        seed=request.seed,
        max_completion_tokens=request.max_output_tokens,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs if request.logprobs else None,
        response_format=_response_format(request.text),
        tools=[_chat_tool(tool) for tool in request.tools] if request.tools else None,
        tool_choice=_chat_tool_choice(request.tool_choice),
        parallel_tool_calls=request.parallel_tool_calls is not False,
        chat_template_kwargs=request.chat_template_kwargs,
        reasoning_effort=reasoning.get("effort"),
    )


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
    return {"type": "function", "function": function}


def _chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    if not isinstance(choice, dict):
        return choice
    if choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    # allowed_tools: the chat path reads the same tool references.
    return {
        "type": "allowed_tools",
        "allowed_tools": {"mode": choice.get("mode", "auto"), "tools": choice.get("tools") or []},
    }


def _response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    fmt = (text or {}).get("format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt["type"] == "json_object":
        return {"type": "json_object"}
    spec = {k: fmt[k] for k in ("name", "schema", "strict") if k in fmt}
    return {"type": "json_schema", "json_schema": spec}


def _param_name(param: str | None, origins: Sequence[str]) -> str | None:
    """A chat request's parameter as the Responses request names it."""
    if param is None:
        return None
    found = _MESSAGE_PARAM.fullmatch(param)
    if found is not None:
        index = int(found.group(1))
        origin = origins[index] if index < len(origins) else "input"
        rest = found.group(2) if origin.startswith("input[") else ""
        return origin + rest
    head, dot, rest = param.partition(".")
    return _FIELD_NAMES.get(head, head) + dot + rest


def response_object(
    request: ResponsesRequest, response_id: str, model: str, created: int
) -> dict[str, Any]:
    """The response as it starts: the request's settings, no output yet."""
    reasoning = request.reasoning or {}
    fmt = (request.text or {}).get("format") or {"type": "text"}
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": "in_progress",
        "background": request.background is True,
        "completed_at": None,
        "error": None,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "max_tool_calls": request.max_tool_calls,
        "model": model,
        "output": [],
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": reasoning.get("effort"), "summary": reasoning.get("summary")},
        "service_tier": "default",
        "store": request.stores,
        "temperature": request.temperature,
        "text": {"format": fmt, "verbosity": "medium"},
        "tool_choice": request.tool_choice or "auto",
        "tools": [_tool_object(tool) for tool in request.tools or []],
        "top_logprobs": request.top_logprobs or 0,
        "top_p": request.top_p,
        "truncation": request.truncation or "disabled",
        "usage": None,
        "user": request.user,
        "metadata": request.metadata or {},
        "safety_identifier": request.safety_identifier,
        "prompt_cache_key": request.prompt_cache_key,
    }


def _tool_object(tool: dict[str, Any]) -> dict[str, Any]:
    if is_mcp(tool):
        return echoed_mcp_tool(tool)
    return {
        "type": "function",
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": tool.get("parameters"),
        "strict": tool.get("strict"),
    }
