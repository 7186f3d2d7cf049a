"""SGLang's native ``POST /generate`` on the one flow: text or token ids in (one prompt or a
batch), SGLang's response shape out."""

from __future__ import annotations

from typing import Any, cast

import msgspec

from turnout.errors import bad_request
from turnout.generation.context import RequestContext
from turnout.generation.flow import Endpoint
from turnout.generation.generate_render import GenerateRenderer
from turnout.generation.models import ModelRuntime
from turnout.generation.output import output_options
from turnout.generation.plan import Plan, Prompt
from turnout.generation.plan_checks import check_choices
from turnout.generation.prompt_size import check_prompt_ids, encode_prompt
from turnout.generation.requests import GenerateRequestBody, NativeSamplingParams
from turnout.generation.unsupported import GENERATE, refuse_unsupported, unsupported
from turnout.wire.sampling import Constraint, ConstraintKind

_CONSTRAINTS: tuple[ConstraintKind, ...] = ("json_schema", "structural_tag", "regex", "ebnf")
_UNSET = (None, None, None, None)


def _check(request: GenerateRequestBody) -> None:
    refuse_unsupported(request, GENERATE)
    if request.logprob_start_len != -1:
        raise unsupported(
            "logprob_start_len",
            "logprob_start_len other than -1 is not supported: prompt logprobs are not returned "
            "by /generate",
        )
    _given_constraints(request.sampling_params)


def _given_constraints(sampling: NativeSamplingParams) -> list[tuple[ConstraintKind, Any]]:
    """The constraints the request sets."""
    values = (sampling.json_schema, sampling.structural_tag, sampling.regex, sampling.ebnf)
    if values == _UNSET:  # the usual request: no constraint (asked twice per request)
        return []
    # An empty constraint is none, as in SGLang (its sampling params test them for truth).
    given = [
        (kind, value)
        for kind, value in zip(_CONSTRAINTS, values, strict=True)
        if value is not None and value != ""
    ]
    if len(given) > 1:
        raise bad_request("only one of json_schema, regex, ebnf, structural_tag", "sampling_params")
    return given


def _constraint(sampling: NativeSamplingParams) -> Constraint | None:
    given = _given_constraints(sampling)
    if not given:
        return None
    kind, value = given[0]
    return Constraint(kind, value if isinstance(value, str) else _json(value))


def _json(value: Any) -> str:
    return msgspec.json.encode(value).decode()


def _batch(request: GenerateRequestBody) -> bool:
    """Whether the request is a batch (a list of texts or of token-id lists)."""
    ids = request.input_ids
    return isinstance(request.text, list) or (
        ids is not None and len(ids) > 0 and isinstance(ids[0], list)
    )


async def _prompts(
    request: GenerateRequestBody, runtime: ModelRuntime, ctx: RequestContext
) -> Plan:
    """Texts tokenized (without special tokens, as SGLang does), or token ids checked."""
    sampling = request.sampling_params
    constraint = _constraint(sampling)
    prompts = []
    if request.text is not None:
        texts = request.text if isinstance(request.text, list) else [request.text]
        check_choices(len(texts), sampling.n, "text")
        for text in texts:
            ids = await encode_prompt(runtime, text, add_special_tokens=False, param="text")
            prompts.append(Prompt(ids, text))
    else:
        items = request.input_ids or []
        id_lists = (
            [x for x in items if isinstance(x, list)]
            if _batch(request)
            else [cast(list[int], items)]
        )
        check_choices(len(id_lists), sampling.n, "input_ids")
        for ids in id_lists:
            check_prompt_ids(runtime, ids, "input_ids")
            prompts.append(Prompt(ids))
    return Plan(
        runtime,
        prompts,
        sampling=sampling,
        max_tokens=sampling.max_tokens if sampling.max_tokens is not None else 128,
        output=output_options(
            sampling,
            logprobs=request.return_logprob,
            keep_token_ids=True,
            stop_token_logprobs=True,
        ),
        constraint=constraint,
        stream=request.stream,
        logprobs=request.return_logprob,
        top_logprobs=request.top_logprobs_num,
        token_ids_logprob=tuple(request.token_ids_logprob or ()),
        require_reasoning=request.require_reasoning,
        request_id=request.rid or ctx.worker_request_id,
    )


def _renderer(request: GenerateRequestBody, plan: Plan, ctx: RequestContext) -> GenerateRenderer:
    return GenerateRenderer(
        plan.request_id or ctx.worker_request_id,
        plan.n,
        len(plan.prompts),
        batch=_batch(request),
        logprobs=request.return_logprob,
        top_logprobs=request.top_logprobs_num > 0,
        wanted_logprobs=bool(request.token_ids_logprob),
        text_in_logprobs=request.return_text_in_logprobs,
        started=ctx.started,
        prompt_tokens=[len(prompt.ids) for prompt in plan.prompts],
    )


ENDPOINT = Endpoint(
    GenerateRequestBody,
    check=_check,
    prompts=_prompts,
    renderer=_renderer,
    description="Answer one ``/generate`` request (a single prompt or a batch).",
)
"""``POST /generate``."""
