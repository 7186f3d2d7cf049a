"""``POST /v1/chat/completions`` on the one flow: the check, the prompt builder (chat template,
tools, reasoning) and the renderer."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import msgspec

from turnout.chat_formats.types import ChatFormat
from turnout.errors import ApiError, bad_request
from turnout.generation import unsupported
from turnout.generation.chat_images import image_parts, prompt_images, vision_for
from turnout.generation.chat_render import ChatRenderer
from turnout.generation.context import RequestContext
from turnout.generation.flow import Endpoint
from turnout.generation.forced_call import ForcedCallParser
from turnout.generation.models import ARRAY_PARSER, ModelRuntime
from turnout.generation.output import output_options
from turnout.generation.plan import Plan, Prompt
from turnout.generation.prompt_logprobs import prompt_logprobs_top, refuse_streamed_prompt_logprobs
from turnout.generation.prompt_size import (
    check_prompt_fits,
    check_prompt_ids,
    encode_prompt,
    render_off_loop,
)
from turnout.generation.requests import ChatCompletionRequest
from turnout.generation.tool_choice import ToolPlan, plan_tools
from turnout.generation.unsupported import refuse_modalities, refuse_unsupported
from turnout.generation.usage import running_usage
from turnout.reasoning.prompt import reasoning_open_at_prompt_end
from turnout.tokenizer import ChatTemplateError
from turnout.tool_calls.types import ToolParser
from turnout.wire.sampling import Constraint

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_THINKING_KEYS = ("enable_thinking", "thinking")


def _check_chat(request: ChatCompletionRequest) -> None:
    refuse_unsupported(request, unsupported.CHAT)
    refuse_streamed_prompt_logprobs(request)
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


def _messages(request: ChatCompletionRequest) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(message) for message in request.messages]


def _constraint(request: ChatCompletionRequest, plan: ToolPlan) -> Constraint | None:
    given = [
        c
        for c in (
            Constraint("json_schema", plan.json_schema) if plan.json_schema else None,
            Constraint("structural_tag", plan.structural_tag) if plan.structural_tag else None,
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


def _vllm_output(request: ChatCompletionRequest) -> dict[str, Any]:
    """The output options of vLLM's extensions (token ids, tokens named by id)."""
    return {
        "keep_token_ids": request.return_token_ids,
        "tokens_as_ids": request.return_tokens_as_token_ids,
        "top_logprobs": request.top_logprobs or 0,
    }


def _echo(request: ChatCompletionRequest) -> str:
    """vLLM's ``echo``: the last message's text when the answer continues its role (the
    assistant's, or any role without a generation prompt)."""
    last = request.messages[-1]
    generation_prompt = request.add_generation_prompt and not request.continue_final_message
    if generation_prompt and last.role != "assistant":
        return ""
    content = last.content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")
    return content or ""


def _history_calls(request: ChatCompletionRequest) -> int:
    return sum(len(m.tool_calls or []) for m in request.messages if m.role == "assistant")


async def _prompts(
    request: ChatCompletionRequest, runtime: ModelRuntime, ctx: RequestContext
) -> Plan:
    """Render the messages with the model's template (or chat format), tokenize, add the
    images, and plan tools and reasoning."""
    images = image_parts(request.messages)
    vision = vision_for(runtime, images) if images else None
    if runtime.chat_format is not None:
        if images:  # a chat format renders text only
            raise unsupported.unsupported(
                images[0].param,
                f"model {runtime.model_id!r} takes no images: its chat format renders text only",
            )
        return await _formatted_prompts(request, runtime, runtime.chat_format, ctx)
    tokenizer = runtime.tokenizer
    tools = plan_tools(
        request.tools,
        request.tool_choice,
        request.response_format,
        runtime.tool_parser is not None,
        parallel=request.parallel_tool_calls,
        call_format=runtime.tool_call_format,
    )
    kwargs = dict(request.chat_template_kwargs or {})
    if request.reasoning_effort is not None:
        kwargs.setdefault("reasoning_effort", request.reasoning_effort)
    try:
        prompt = await render_off_loop(
            ctx.body_size,
            tokenizer.apply_chat_template,
            _messages(request),
            tools.template_tools,
            None if request.continue_final_message else request.add_generation_prompt,
            continue_final_message=request.continue_final_message,
            documents=request.documents,
            **kwargs,
        )
    except ChatTemplateError as exc:
        raise ApiError(400, f"chat template error: {exc}", code="chat_template_error") from None
    prompt_ids = await encode_prompt(runtime, prompt, add_special_tokens=False, param="messages")
    mm_inputs = None
    if vision is not None:
        fits = functools.partial(
            check_prompt_fits,
            runtime,
            param="messages",
            n=request.n,
            max_tokens=request.max_completion_tokens or request.max_tokens,
        )
        prompt_ids, mm_inputs = await prompt_images(vision, images, prompt_ids, fits)
        check_prompt_ids(runtime, prompt_ids, "messages")

    thinking = _thinking(kwargs)
    reasoning = (
        runtime.reasoning_parser is not None
        and request.separate_reasoning
        and thinking is not False
    )
    start_in_reasoning = reasoning_open_at_prompt_end(
        prompt, runtime.reasoning_start_marker, runtime.reasoning_end_markers, thinking
    )
    tool_parser, tool_parser_name = _tool_parser(tools, runtime)
    options = output_options(
        request,
        logprobs=request.logprobs,
        tools=tools.parse_tools,
        tool_parser=tool_parser,
        tool_parser_name=tool_parser_name,
        reasoning=reasoning,
        start_in_reasoning=start_in_reasoning,
        history_calls=_history_calls(request),
        max_calls=None if request.parallel_tool_calls else 1,
        **_vllm_output(request),
    )
    return Plan(
        runtime,
        [Prompt(prompt_ids, prompt, mm_inputs)],
        sampling=request,
        max_tokens=request.max_completion_tokens or request.max_tokens,
        output=options,
        constraint=_constraint(request, tools),
        stream=request.stream,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs or 0,
        require_reasoning=reasoning,
        prompt_logprobs=prompt_logprobs_top(request),
    )


def _refuse_for_format(request: ChatCompletionRequest, tools: ToolPlan, name: str) -> None:
    """What a chat format's output cannot honour: constraints over the whole output (they would
    forbid the format's own markup) and stop strings (the format reads tokens, not text)."""
    why = f"not supported for this model (chat format {name!r})"
    if tools.mode in ("array", "forced"):
        raise unsupported.unsupported(
            "tool_choice", f"tool_choice {request.tool_choice!r} is {why}; use 'auto'"
        )
    refused = {
        "response_format": tools.json_schema is not None,
        "regex": bool(request.regex),
        "ebnf": bool(request.ebnf),
        "stop": bool(request.stop),
        "stop_regex": bool(request.stop_regex),
        "continue_final_message": request.continue_final_message,
        "documents": bool(request.documents),
    }
    for field_name, given in refused.items():
        if given:
            raise unsupported.unsupported(field_name, f"{field_name} is {why}")


async def _formatted_prompts(
    request: ChatCompletionRequest,
    runtime: ModelRuntime,
    chat_format: ChatFormat,
    ctx: RequestContext,
) -> Plan:
    """The plan of a model with a chat format: the format renders the prompt ids and reads the
    output (reasoning, content, tool calls) in place of the template and the parsers."""
    name = runtime.chat_format_name or type(chat_format).__name__
    tools = plan_tools(
        request.tools,
        request.tool_choice,
        request.response_format,
        True,
        parallel=request.parallel_tool_calls,
    )
    _refuse_for_format(request, tools, name)
    options = dict(request.chat_template_kwargs or {})
    if request.reasoning_effort is not None:
        options.setdefault("reasoning_effort", request.reasoning_effort)
    try:
        prompt = await render_off_loop(
            ctx.body_size,
            chat_format.render,
            _messages(request),
            tools=tools.template_tools,
            options=options,
        )
    except ChatTemplateError as exc:
        raise ApiError(400, f"chat format error: {exc}", code="chat_template_error") from None
    check_prompt_ids(runtime, prompt.ids, "messages")
    reasoning = request.separate_reasoning
    output = output_options(
        request,
        logprobs=request.logprobs,
        tools=tools.parse_tools,
        reasoning=reasoning,
        history_calls=_history_calls(request),
        max_calls=None if request.parallel_tool_calls else 1,
        **_vllm_output(request),
        chat_format=chat_format,
    )
    return Plan(
        runtime,
        [Prompt(prompt.ids, prompt.text)],
        sampling=request,
        max_tokens=request.max_completion_tokens or request.max_tokens,
        output=output,
        stream=request.stream,
        logprobs=request.logprobs,
        top_logprobs=request.top_logprobs or 0,
        require_reasoning=reasoning,
        prompt_logprobs=prompt_logprobs_top(request),
    )


def _tool_parser(
    tools: ToolPlan, runtime: ModelRuntime
) -> tuple[Callable[[], ToolParser] | None, str | None]:
    """The factory and registered name of the parser reading the output's tool calls."""
    if tools.mode == "model":
        return runtime.tool_parser, runtime.tool_parser_name
    if tools.mode == "array":
        return runtime.array_parser, ARRAY_PARSER
    if tools.mode == "forced":
        forced_name = tools.forced_name or ""

        def forced() -> ForcedCallParser:
            return ForcedCallParser(forced_name)

        return forced, "forced_call"
    return None, None


def _renderer(request: ChatCompletionRequest, plan: Plan, ctx: RequestContext) -> ChatRenderer:
    options = request.stream_options
    return ChatRenderer(
        request.rid or ctx.request_id,
        plan.model_id,
        ctx.created,
        request.n,
        include_usage=bool(options and options.include_usage),
        running=running_usage(options, [len(p.ids) for p in plan.prompts], request.n),
        stream_reasoning=request.stream_reasoning,
        echo=_echo(request) if request.echo else "",
        prompt_ids=plan.prompts[0].ids if request.return_token_ids else None,
        prompt_logprobs=request.prompt_logprobs is not None,
    )


ENDPOINT = Endpoint(
    ChatCompletionRequest,
    check=_check_chat,
    prompts=_prompts,
    renderer=_renderer,
    description="Answer one chat completion request (streamed or one JSON body).",
)
"""``POST /v1/chat/completions``."""
