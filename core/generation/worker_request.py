"""Request building: the worker's ``GenerateRequest`` for each prompt of a plan."""

from __future__ import annotations

import functools
from typing import Any

from turnout.errors import ApiError
from turnout.generation.plan import Plan
from turnout.generation.requests import SamplingFields
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.sampling import (
    Constraint,
    InvalidSamplingParams,
    build_generate_request,
    build_sampling_params,
)

#: Tokens per worker message when turnout streams from the worker only to watch for its stop
#: strings while the client waits for one answer: 16x fewer messages, at most 16 tokens wasted.
STOP_WATCH_INTERVAL = 16

_SAMPLING = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
)


def worker_streaming(client_streams: bool, has_stops: bool) -> tuple[bool, int | None]:
    """Whether to ask the worker for a stream, and with how many tokens per message.

    A client that streams gets every token as it comes. A one-shot answer is asked of the
    worker in one message — unless turnout must watch for stop strings to abort early.
    """
    if client_streams:
        return True, None
    if has_stops:
        return True, STOP_WATCH_INTERVAL
    return False, None


def sampling_params(
    request: SamplingFields,
    *,
    max_tokens: int | None,
    constraint: Constraint | None,
    stream_interval: int | None = None,
) -> pb.SamplingParams:
    """Map the request's sampling fields onto fully populated SamplingParams.

    Requests with the same settings get the same message (most clients send the same few):
    copy it, never change it.
    """
    bias = request.logit_bias
    settings: _Settings = (
        *[getattr(request, name) for name in _SAMPLING],
        request.n,
        request.min_tokens or 0,
        tuple(request.stop_token_ids or ()),
        request.ignore_eos,
        request.no_stop_trim,
        request.skip_special_tokens,
        request.spaces_between_special_tokens,
        None if bias is None else tuple(bias.items()),
        request.seed,
        max_tokens,
        constraint,
        stream_interval,
    )
    try:
        return _built_params(settings)
    except InvalidSamplingParams as exc:
        raise ApiError(400, str(exc), code="invalid_value") from None


#: What :func:`sampling_params` reads of a request, hashable: the ``_SAMPLING`` values, then
#: n, min_tokens, stop_token_ids, ignore_eos, no_stop_trim, skip_special_tokens,
#: spaces_between_special_tokens, logit_bias items, seed, max_tokens, constraint and
#: stream_interval.
_Settings = tuple[Any, ...]


@functools.lru_cache(maxsize=256)
def _built_params(settings: _Settings) -> pb.SamplingParams:
    values = settings[: len(_SAMPLING)]
    (
        n,
        min_tokens,
        stop_token_ids,
        ignore_eos,
        no_stop_trim,
        skip_special_tokens,
        spaces_between_special_tokens,
        bias,
        seed,
        max_tokens,
        constraint,
        stream_interval,
    ) = settings[len(_SAMPLING) :]
    explicit = {
        name: value for name, value in zip(_SAMPLING, values, strict=True) if value is not None
    }
    return build_sampling_params(
        max_new_tokens=max_tokens,
        n=n,
        min_new_tokens=min_tokens,
        stop_token_ids=list(stop_token_ids),
        ignore_eos=ignore_eos,
        no_stop_trim=no_stop_trim,
        skip_special_tokens=skip_special_tokens,
        spaces_between_special_tokens=spaces_between_special_tokens,
        constraint=constraint,
        logit_bias=None if bias is None else dict(bias),
        custom_params={"seed": seed} if seed is not None else None,
        stream_interval=stream_interval,
        **explicit,
    )


def worker_requests(
    plan: Plan, request_id: str, *, worker_streams: bool, stream_interval: int | None
) -> list[pb.GenerateRequest]:
    """One ``GenerateRequest`` per prompt, all with the same SamplingParams; the id is
    ``request_id``, or ``<request_id>-<k>`` for prompt ``k`` when there are several. See
    :func:`worker_streaming` for ``worker_streams`` and ``stream_interval``."""
    params = sampling_params(
        plan.sampling,
        max_tokens=plan.max_tokens,
        constraint=plan.constraint,
        stream_interval=stream_interval,
    )
    several = len(plan.prompts) > 1
    try:
        requests = [
            build_generate_request(
                request_id=f"{request_id}-{k}" if several else request_id,
                input_ids=prompt.ids,
                sampling_params=params,
                original_text=prompt.text,
                stream=worker_streams,
                return_logprob=plan.logprobs,
                top_logprobs_num=max(plan.top_logprobs, plan.prompt_logprobs or 0),
                prompt_logprobs_start=None if plan.prompt_logprobs is None else 0,
                token_ids_logprob=plan.token_ids_logprob,
                require_reasoning=plan.require_reasoning,
                lora_id=plan.lora_id,
            )
            for k, prompt in enumerate(plan.prompts)
        ]
    except InvalidSamplingParams as exc:
        raise ApiError(400, str(exc), code="invalid_value") from None
    for request, prompt in zip(requests, plan.prompts, strict=True):
        if prompt.mm_inputs is not None:
            request.mm_inputs.CopyFrom(prompt.mm_inputs)
    return requests
