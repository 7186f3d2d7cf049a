"""``POST /v1/chat/completions``: render, tokenize, generate, parse, answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec

from turnout.generation import unsupported
from turnout.generation.chat_render import ChatFolder, ChatStream, running_usage
from turnout.generation.context import RequestContext
from turnout.generation.events import Event
from turnout.generation.forced_call import ForcedCallParser
from turnout.generation.models import ARRAY_PARSER
from turnout.generation.pipeline import (
    generate_request,
    make_processors,
    output_options,
    sampling_params,
    stream_events,
    worker_streaming,
)
from turnout.generation.prompt_size import encode_prompt, render_off_loop
from turnout.generation.requests import ChatCompletionRequest
from turnout.generation.tool_choice import ToolPlan, plan_tools
from turnout.generation.unsupported import refuse_modalities, refuse_unsupported
from turnout.reasoning.prompt import reasoning_open_at_prompt_end
from turnout.routing.types import RoutingRequest
from turnout.server.context import Services
from turnout.server.errors import ApiError, bad_request
from turnout.server.protocol import decode_body
from turnout.server.respond import Answer, answer_json, answer_stream
from turnout.tokenizer import ChatTemplateError
from turnout.tokenizer.content_parts import media_kind
from turnout.wire.sampling import Constraint

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_THINKING_KEYS = ("enable_thinking", "thinking")


def _check_chat(request: ChatCompletionRequest) -> None:
    refuse_unsupported(request, unsupported.CHAT)
    refuse_modalities(request.modalities)
    for i, message in enumerate(request.messages):
        if message.role not in _ROLES:
            raise bad_request(
                f"messages[{i}].role must be one of {', '.join(sorted(_ROLES))}",
                f"messages[{i}].role",
            )
        if message.role == "tool" and message.tool_call_id is None:
            raise bad_request(
                f"messages[{i}]: a tool message needs tool_call_id", f"messages[{i}].tool_call_id"
            )
        if isinstance(message.content, list):
            for j, part in enumerate(message.content):
                if not isinstance(part.get("type"), str):
                    raise bad_request(
                        f"messages[{i}].content[{j}] needs a 'type'", f"messages[{i}].content"
                    )
                if media_kind(part) is not None:  # until images reach the workers (issue 20)
                    raise unsupported.unsupported(
                        f"messages[{i}].content[{j}]",
                        f"{part['type']} parts are not supported by turnout yet",
                    )


def _messages(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(message) for message in request.messages]


def _constraint(request: ChatCompletionRequest, plan: ToolPlan) -> Constraint | None:
    given = [
        c
        for c in (
            Constraint("json_schema", plan.json_schema) if plan.json_schema else None,
            Constraint("regex", request.regex) if request.regex else None,
            Constraint("ebnf", request.ebnf) if request.ebnf else None,
        )
        if c is not None
    ]
    if len(given) > 1:
        raise bad_request("only one of response_format, regex, ebnf and a tool_choice constraint")
    return given[0] if given else None


def _thinking(kwargs: dict[str, Any]) -> bool | None:
    for key in _THINKING_KEYS:
        if key in kwargs:
            return bool(kwargs[key])
    return None


def _history_calls(request: ChatCompletionRequest) -> int:
    return sum(len(m.tool_calls or []) for m in request.messages if m.role == "assistant")


async def handle_chat(services: Services, body: bytes, ctx: RequestContext) -> Answer:
    """Answer one chat completion request (streamed or one JSON body)."""
    request = decode_body(body, ChatCompletionRequest)
    _check_chat(request)
    model_id = services.models.resolve_name(request.model)
    runtime = await services.models.runtime(model_id)
    tokenizer = runtime.tokenizer
    plan = plan_tools(
        request.tools,
        request.tool_choice,
        request.response_format,
        runtime.tool_parser is not None,
        parallel=request.parallel_tool_calls,
    )
    kwargs = dict(request.chat_template_kwargs or {})
    if request.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", request.reasoning_effort)
    try:
        prompt = await render_off_loop(
            len(body),
            tokenizer.apply_chat_template,
            _messages(request),
            plan.template_tools,
            None if request.continue_final_message else request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            documents=request.documents,
            **kwargs,
        )
    except ChatTemplateError as exc:
        raise ApiError(400, f"chat template error: {exc}", code="chat_template_error") from None
    prompt_ids = await encode_prompt(runtime, prompt, add_special_tokens=False, param="messages")

    thinking = _thinking(kwargs)
    reasoning = (
        runtime.reasoning_parser is not None
        and request.separate_reasoning
        and thinking is not False
    )
    start_in_reasoning = reasoning_open_at_prompt_end(
        prompt, runtime.reasoning_start_marker, runtime.reasoning_end_markers, thinking
    )

    tool_parser, tool_parser_name = None, None
    if plan.mode == "model":
        tool_parser, tool_parser_name = runtime.tool_parser, runtime.tool_parser_name
    elif plan.mode == "array":
        tool_parser, tool_parser_name = runtime.array_parser, ARRAY_PARSER
    elif plan.mode == "forced":
        forced_name = plan.forced_name or ""

        def tool_parser() -> ForcedCallParser:
            return ForcedCallParser(forced_name)

        tool_parser_name = "forced_call"

    options = output_options(
        request,
        logprobs=request.logprobs,
        tools=plan.parse_tools,
        tool_parser=tool_parser,
        tool_parser_name=tool_parser_name,
        reasoning=reasoning,
        start_in_reasoning=start_in_reasoning,
        history_calls=_history_calls(request),
        max_calls=None if request.parallel_tool_calls else 1,
    )
    processors = make_processors(runtime, options)
    worker_streams, interval = worker_streaming(request.stream, options.has_stops)
    params = sampling_params(
        request,
        max_tokens=request.max_completion_tokens or request.max_tokens,
        skip_special_tokens=request.skip_special_tokens,
        constraint=_constraint(request, plan),
        stop_token_ids=request.stop_token_ids or (),
        stream_interval=interval,
    )
    worker_request = generate_request(
        ctx.worker_request_id,
        prompt_ids,
        params,
        prompt_text=prompt,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs or 0,
        require_reasoning=reasoning,
        stream=worker_streams,
    )
    routing = RoutingRequest(model_id, prompt_ids, prompt, ctx.headers, ctx.routing_key)
    session = await services.open_stream(model_id, routing, worker_request)
    events = stream_events(session, processors, worker_streams=worker_streams)
    response_id = request.rid or ctx.request_id
    if request.stream:
        stream = ChatStream(
            response_id,
            model_id,
            ctx.created,
            include_usage=bool(request.stream_options and request.stream_options.include_usage),
            running=running_usage(request.stream_options, [len(prompt_ids)], request.n),
            stream_reasoning=request.stream_reasoning,
        )
        return answer_stream(_sse_chunks(stream, request.n, events), services)
    folder = ChatFolder(response_id, model_id, ctx.created, request.n)
    async for batch in events:
        for event in batch:
            folder.add(event)
    return answer_json(folder.response())


async def _sse_chunks(
    stream: ChatStream, n: int, events: AsyncIterator[list[Event]]
) -> AsyncIterator[list[dict[str, Any]]]:
    """Chunk objects per batch of events; the role chunks go out with the first batch."""
    chunks = stream.role_chunks(n)
    async for batch in events:
        for event in batch:
            chunks.extend(stream.chunks(event))
        if chunks:
            yield chunks
            chunks = []
