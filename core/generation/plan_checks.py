"""Checks of a request that need its model and its prompts, made on its plan before anything
reaches a worker: ``min_tokens`` against the effective maximum (the endpoint's default
``max_tokens``, and the room the prompt leaves in the model's context), and ``logit_bias`` ids
against the model's vocabulary (each a 400 naming the field).

Without them a worker gets ``min_new_tokens`` it can never reach (up to 2**31-1: it keeps
generating until it runs out of memory) or a bias for a token its logits do not have.
"""

from __future__ import annotations

from turnout.errors import bad_request
from turnout.generation.plan import Plan
from turnout.generation.requests import NativeSamplingParams, SamplingFields

__all__ = ["MAX_CHOICES", "check_choices", "check_plan", "vocabulary_size"]

#: Most choices (prompts × n) one request may ask for.
MAX_CHOICES = 128


def check_choices(prompts: int, n: int, param: str) -> None:
    """A 400 (naming ``param``) when ``prompts`` × ``n`` choices are more than one request may
    ask for: each is a sequence the workers generate and the router holds."""
    if prompts * n > MAX_CHOICES:
        raise bad_request(f"at most {MAX_CHOICES} choices (prompts × n) per request", param)


def _param(sampling: SamplingFields, name: str) -> str:
    """The request's path to a sampling field (``/generate`` nests them)."""
    if isinstance(sampling, NativeSamplingParams):
        native = {"min_tokens": "min_new_tokens", "max_tokens": "max_new_tokens"}.get(name, name)
        return f"sampling_params.{native}"
    return name


def vocabulary_size(plan: Plan) -> int:
    """Token ids the model's logits have: ``config.json``'s ``vocab_size`` (padded output
    layers are larger than the tokenizer), else the tokenizer's with its added tokens."""
    return plan.runtime.facts.vocab_size or plan.runtime.tokenizer.vocab_size


def _check_min_tokens(plan: Plan) -> None:
    sampling = plan.sampling
    wanted = sampling.min_tokens
    if not wanted:
        return
    param = _param(sampling, "min_tokens")
    name = param.rpartition(".")[2]
    if plan.max_tokens is not None and wanted > plan.max_tokens:  # the endpoint's default
        max_name = _param(sampling, "max_tokens").rpartition(".")[2]
        raise bad_request(
            f"{name} ({wanted}) must not exceed {max_name} ({plan.max_tokens} when not given)",
            param,
        )
    limit = plan.runtime.prompt_limit()
    if limit is None or not plan.prompts:
        return  # the workers did not say their context
    longest = max(len(prompt.ids) for prompt in plan.prompts)
    room = max(0, limit.context_length - longest)
    if wanted > room:
        raise bad_request(
            f"{name} ({wanted}) is more than the {room} tokens the prompt ({longest} tokens) "
            f"leaves in the model's context of {limit.context_length} tokens",
            param,
        )


def _check_logit_bias(plan: Plan) -> None:
    bias = plan.sampling.logit_bias
    if not bias:
        return
    size = vocabulary_size(plan)
    for key in bias:  # the keys are decimal token ids (checked with the request)
        if int(key) >= size:
            raise bad_request(
                f"logit_bias: token id {key} is not in the model's vocabulary "
                f"(ids 0 to {size - 1})",
                _param(plan.sampling, "logit_bias"),
            )


def check_plan(plan: Plan) -> None:
    """A 400 for sampling fields the model or the prompt cannot honour."""
    _check_logit_bias(plan)
    _check_min_tokens(plan)
