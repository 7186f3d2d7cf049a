"""``POST /v1/completions`` on the one flow: prompts as text, lists of text or token ids (one
worker request each), echo, logprobs."""

from __future__ import annotations

from turnout.errors import bad_request
from turnout.generation.completions_render import CompletionRenderer
from turnout.generation.context import RequestContext
from turnout.generation.flow import Endpoint
from turnout.generation.models import ModelRuntime
from turnout.generation.output import output_options
from turnout.generation.plan import Plan, Prompt
from turnout.generation.plan_checks import check_choices
from turnout.generation.prompt_logprobs import prompt_logprobs_top, refuse_streamed_prompt_logprobs
from turnout.generation.prompt_size import check_prompt_ids, encode_prompt, truncate_prompt
from turnout.generation.requests import CompletionRequest, PromptItem
from turnout.generation.tool_choice import plan_tools
from turnout.generation.unsupported import COMPLETIONS, refuse_unsupported, unsupported
from turnout.generation.usage import running_usage
from turnout.wire.sampling import Constraint, ConstraintKind


def _check(request: CompletionRequest) -> None:
    if request.suffix:
        raise unsupported("suffix", "suffix is not supported")
    if request.best_of is not None and request.best_of != request.n:
        raise unsupported("best_of", "best_of is not supported (only best_of = n)")
    refuse_unsupported(request, COMPLETIONS)
    refuse_streamed_prompt_logprobs(request)


def given_prompts(prompt: str | list[PromptItem], param: str) -> list[str | list[int]]:
    """The prompts of a completions-style ``prompt``: a string, a list of strings and token-id
    lists, or one list of token ids (a 400 naming ``param`` for anything else)."""
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise bad_request(f"{param} must not be empty", param)
    prompts: list[str | list[int]] = []
    ids: list[int] = []
    for item in prompt:
        if isinstance(item, int) and not isinstance(item, bool):
            ids.append(item)
        elif isinstance(item, str):
            prompts.append(item)
        elif isinstance(item, list) and item and all(isinstance(t, int) for t in item):
            prompts.append(list(item))
        else:
            raise bad_request(f"{param} must be a string, a list of strings or token ids", param)
    if ids and prompts:
        raise bad_request(f"{param} must be a string, a list of strings or token ids", param)
    return [ids] if ids else prompts


async def _prompts(request: CompletionRequest, runtime: ModelRuntime, ctx: RequestContext) -> Plan:
    """Each prompt tokenized (text) or checked (token ids), with its text (for echo)."""
    given = given_prompts(request.prompt, "prompt")
    check_choices(len(given), request.n, "prompt")
    prompts = []
    keep = request.truncate_prompt_tokens
    for item in given:
        if isinstance(item, str):
            ids = await encode_prompt(
                runtime, item, add_special_tokens=True, param="prompt", keep_last=keep
            )
            # A truncated prompt is what its ids say (what echo repeats).
            prompts.append(Prompt(ids, item if keep is None else runtime.tokenizer.decode(ids)))
        else:
            ids = truncate_prompt(runtime, item, keep)
            check_prompt_ids(runtime, ids, "prompt")
            prompts.append(Prompt(ids, runtime.tokenizer.decode(ids)))
    logprobs = request.logprobs is not None
    top = request.logprobs or 0
    return Plan(
        runtime,
        prompts,
        sampling=request,
        max_tokens=request.max_tokens if request.max_tokens is not None else 16,
        output=output_options(
            request,
            logprobs=logprobs,
            keep_token_ids=request.return_token_ids,
            tokens_as_ids=request.return_tokens_as_token_ids,
            top_logprobs=top,
        ),
        constraint=_constraint(request),
        stream=request.stream,
        logprobs=logprobs,
        top_logprobs=top,
        prompt_logprobs=prompt_logprobs_top(
            request, request.logprobs if request.echo and logprobs else None
        ),
    )


def _constraint(request: CompletionRequest) -> Constraint | None:
    """The one output constraint of a completion request (SGLang: regex, ebnf, json_schema or
    response_format)."""
    response_schema = plan_tools(None, None, request.response_format, False).json_schema
    candidates: list[tuple[ConstraintKind, str | None]] = [
        ("regex", request.regex),
        ("ebnf", request.ebnf),
        ("json_schema", request.json_schema),
        ("json_schema", response_schema),
    ]
    given = [Constraint(kind, value) for kind, value in candidates if value]
    if len(given) > 1:
        raise bad_request("only one of regex, ebnf, json_schema and response_format")
    return given[0] if given else None


def _renderer(request: CompletionRequest, plan: Plan, ctx: RequestContext) -> CompletionRenderer:
    options = request.stream_options
    return CompletionRenderer(
        request.rid or ctx.request_id,
        plan.model_id,
        ctx.created,
        request.n,
        [prompt.text for prompt in plan.prompts],
        echo=request.echo,
        logprobs=request.logprobs is not None,
        include_usage=bool(options and options.include_usage),
        running=running_usage(options, [len(p.ids) for p in plan.prompts], request.n),
        prompt_ids=[p.ids for p in plan.prompts] if request.return_token_ids else None,
        prompt_logprobs=request.prompt_logprobs is not None,
    )


ENDPOINT = Endpoint(
    CompletionRequest,
    check=_check,
    prompts=_prompts,
    renderer=_renderer,
    description="Answer a text completion request; several prompts run as one request each.",
)
"""``POST /v1/completions``."""
