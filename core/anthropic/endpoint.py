"""``POST /v1/messages`` on the one flow: the prompt builder and the renderer.

The prompt builder reads the system text and the content blocks as chat messages and hands a
chat request to the chat endpoint's own check and prompt builder: the chat template, tools and
``tool_choice``, the reasoning parser, constraints and sampling are the chat path's, not a copy
of it. ``thinking`` is the model's thinking switch (``enable_thinking`` for its template);
``max_tokens`` is clamped to the room the prompt leaves in the model's context.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from typing import Any

from turnout.anthropic.blocks import conversation
from turnout.anthropic.render import MessagesRenderer
from turnout.anthropic.request import CountTokensRequest, MessagesRequest, check_request
from turnout.errors import ApiError
from turnout.generation import chat
from turnout.generation.context import RequestContext
from turnout.generation.flow import Endpoint
from turnout.generation.models import ModelRuntime
from turnout.generation.plan import Plan
from turnout.generation.requests import ChatCompletionRequest

#: Chat request fields → the Messages request's names (errors name what the client sent).
_FIELD_NAMES = {
    "max_completion_tokens": "max_tokens",
    "stop": "stop_sequences",
    "parallel_tool_calls": "tool_choice.disable_parallel_tool_use",
    "reasoning_effort": "output_config.effort",
    "response_format": "output_config.format",
}
_MESSAGE_PARAM = re.compile(r"messages\[(\d+)\](.*)")


def new_message_id() -> str:
    """A message id, as Anthropic's look (``msg_…``)."""
    return "msg_" + secrets.token_hex(12)


def chat_request_of(
    request: MessagesRequest | CountTokensRequest, messages: list[Any], *, stream: bool = False
) -> ChatCompletionRequest:
    """The chat request the chat path builds the prompt of."""
    kwargs: dict[str, Any] = {}
    thinking = (request.thinking or {}).get("type")
    if thinking in ("enabled", "adaptive"):
        kwargs["enable_thinking"] = True
    elif thinking == "disabled":
        kwargs["enable_thinking"] = False
    choice = request.tool_choice or {}
    config = request.output_config or {}
    fmt = config.get("format")
    continues = messages[-1].role == "assistant" if messages else False
    extra: dict[str, Any] = {}
    if isinstance(request, MessagesRequest):
        extra = {
            "max_completion_tokens": request.max_tokens,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k,
            "stop": request.stop_sequences or None,
        }
    return ChatCompletionRequest(
        messages=messages,
        model=request.model,
        stream=stream,
        tools=[_chat_tool(tool) for tool in request.tools] if request.tools else None,
        tool_choice=_chat_tool_choice(choice.get("type")),
        parallel_tool_calls=not choice.get("disable_parallel_tool_use", False),
        chat_template_kwargs=kwargs or None,
        reasoning_effort=config.get("effort"),
        response_format=(
            {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}
            if fmt
            else None
        ),
        continue_final_message=continues,
        add_generation_prompt=not continues,
        **extra,
    )


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def _chat_tool_choice(kind: str | None) -> str | None:
    return {"auto": "auto", "any": "required", "none": "none"}.get(kind or "")


async def chat_plan(
    request: MessagesRequest | CountTokensRequest,
    runtime: ModelRuntime,
    ctx: RequestContext,
    *,
    stream: bool = False,
) -> Plan:
    """The chat path's plan for a Messages request (checked by :func:`check_request`)."""
    talk = conversation(request.system, request.messages)
    chat_request = chat_request_of(request, talk.messages, stream=stream)
    choice = request.tool_choice or {}
    if choice.get("type") == "tool":
        chat_request.tool_choice = {"type": "function", "function": {"name": choice["name"]}}
    try:
        chat.ENDPOINT.check(chat_request)
        return await chat.ENDPOINT.prompts(chat_request, runtime, ctx)
    except ApiError as exc:
        given = exc.param
        exc.param = _param_name(given, talk.origins)
        if given and exc.param and exc.message.startswith(given):
            exc.message = exc.param + exc.message[len(given) :]
        raise


def _param_name(param: str | None, origins: Sequence[str]) -> str | None:
    """A chat request's parameter as the Messages request names it."""
    if param is None:
        return None
    found = _MESSAGE_PARAM.fullmatch(param)
    if found is not None:
        index = int(found.group(1))
        return origins[index] if index < len(origins) else "messages"
    head, dot, rest = param.partition(".")
    return _FIELD_NAMES.get(head, head) + dot + rest


async def _prompts(request: MessagesRequest, runtime: ModelRuntime, ctx: RequestContext) -> Plan:
    plan = await chat_plan(request, runtime, ctx, stream=request.stream)
    limit = runtime.prompt_limit()
    if limit is not None and plan.max_tokens is not None:
        # Clients ask for large caps (Claude Code: 64000): the answer gets what room is left.
        room = limit.context_length - max(len(prompt.ids) for prompt in plan.prompts)
        plan.max_tokens = max(1, min(plan.max_tokens, room))
    return plan


def _renderer(request: MessagesRequest, plan: Plan, ctx: RequestContext) -> MessagesRenderer:
    message: dict[str, Any] = {
        "id": new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": request.model or plan.model_id,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    return MessagesRenderer(
        message,
        input_tokens=len(plan.prompts[0].ids),
        stop_sequences=request.stop_sequences,
        show_thinking=(request.thinking or {}).get("display") != "omitted",
    )


ENDPOINT = Endpoint(
    MessagesRequest,
    check=check_request,
    prompts=_prompts,
    renderer=_renderer,
    description="Create a message (Anthropic's Messages API), streamed as typed events or as "
    "one JSON body.",
    typed_events=True,
)
"""``POST /v1/messages``."""
