"""Build ``SamplingParams`` and ``GenerateRequest`` messages for SGLang workers.

The worker reads proto3 zeros literally (temperature 0 means greedy, top_p 0 is invalid), so every
field is always filled in, with SGLang's own defaults for whatever the caller leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from google.protobuf import struct_pb2

from turnout.errors import TurnoutError
from turnout.wire.proto import sglang_scheduler_pb2 as pb

__all__ = [
    "Constraint",
    "ConstraintKind",
    "InvalidSamplingParams",
    "build_generate_request",
    "build_sampling_params",
]

ConstraintKind = Literal["json_schema", "regex", "ebnf", "structural_tag"]

# Our name for a constraint kind → the SamplingParams field of the `constraint` oneof.
_CONSTRAINT_FIELDS: Final[Mapping[str, str]] = {
    "json_schema": "json_schema",
    "regex": "regex",
    "ebnf": "ebnf_grammar",
    "structural_tag": "structural_tag",
}


class InvalidSamplingParams(TurnoutError, ValueError):
    """A sampling setting is out of range; the message names the setting and its value."""


@dataclass(frozen=True, slots=True)
class Constraint:
    """A grammar the worker must constrain decoding to (at most one per request).

    ``value`` is the JSON schema text, the regex, the EBNF grammar or the xgrammar structural-tag
    JSON, depending on ``kind``.
    """

    kind: ConstraintKind
    value: str

    def __post_init__(self) -> None:
        if self.kind not in _CONSTRAINT_FIELDS:
            raise InvalidSamplingParams(
                f"constraint kind must be one of {sorted(_CONSTRAINT_FIELDS)}, got {self.kind!r}"
            )
        if not self.value:
            raise InvalidSamplingParams(f"{self.kind} constraint is empty")

    @property
    def proto_field(self) -> str:
        """Name of the ``SamplingParams.constraint`` oneof member carrying it."""
        return _CONSTRAINT_FIELDS[self.kind]


#: Ranges of the proto's scalar types. Older SGLang protos declare the counts and token ids
#: int32 where ours says uint32, so those stay within int32 too.
_INT32 = (-(2**31), 2**31 - 1)
_COUNT = (0, 2**31 - 1)
_FLOAT32_MAX = 3.4028234663852886e38


def _check(ok: bool, name: str, value: object, rule: str) -> None:
    if not ok:
        raise InvalidSamplingParams(f"{name} {rule}, got {value!r}")


def _check_int(name: str, value: int, bounds: tuple[int, int]) -> None:
    low, high = bounds
    if not (isinstance(value, int) and low <= value <= high):
        raise InvalidSamplingParams(f"{name} must be in [{low}, {high}], got {value!r}")


def _check_float(name: str, value: float) -> None:
    # NaN and the infinities fail the range comparison.
    if not (isinstance(value, int | float) and -_FLOAT32_MAX <= value <= _FLOAT32_MAX):
        raise InvalidSamplingParams(f"{name} must be a finite float32, got {value!r}")


def build_sampling_params(
    *,
    max_new_tokens: int | None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = -1,
    min_p: float = 0.0,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    repetition_penalty: float = 1.0,
    n: int = 1,
    min_new_tokens: int = 0,
    stop_token_ids: Sequence[int] = (),
    stop: Sequence[str] = (),
    ignore_eos: bool = False,
    no_stop_trim: bool = False,
    skip_special_tokens: bool = True,
    spaces_between_special_tokens: bool = True,
    constraint: Constraint | None = None,
    logit_bias: Mapping[str, float] | None = None,
    stream_interval: int | None = None,
    custom_params: Mapping[str, Any] | None = None,
) -> pb.SamplingParams:
    """A fully populated ``SamplingParams``; raises ``InvalidSamplingParams`` when a value cannot
    be carried by the wire format.

    Only wire invariants are checked here (finite float32s, integers within their proto type,
    ``n`` and ``stream_interval`` at least 1 because the worker reads 0 literally); what the
    values mean (``top_p`` in (0, 1], ``top_k`` -1 or >= 1 …) is checked where requests are
    decoded, and by the worker. ``max_new_tokens=None`` leaves the limit to the worker (the
    context length). ``stop`` strings are passed through as given, but note that workers running
    without a tokenizer (every SGLang gRPC worker) reject them: turnout matches stop strings
    itself and normally sends only ``stop_token_ids``.
    """
    _check_float("temperature", temperature)
    _check_float("top_p", top_p)
    _check_float("min_p", min_p)
    _check_float("frequency_penalty", frequency_penalty)
    _check_float("presence_penalty", presence_penalty)
    _check_float("repetition_penalty", repetition_penalty)
    for key, bias in (logit_bias or {}).items():
        _check_float(f"logit_bias[{key!r}]", bias)
    _check_int("top_k", top_k, _INT32)
    _check_int("n", n, (1, _COUNT[1]))
    _check_int("min_new_tokens", min_new_tokens, _COUNT)
    if max_new_tokens is not None:
        _check_int("max_new_tokens", max_new_tokens, _COUNT)
    if stop_token_ids:
        bad_ids = [t for t in stop_token_ids if not (isinstance(t, int) and 0 <= t <= _COUNT[1])]
        _check(not bad_ids, "stop_token_ids", bad_ids[:5], f"must be token ids in {list(_COUNT)}")
    if stream_interval is not None:
        _check_int("stream_interval", stream_interval, (1, _INT32[1]))

    params = pb.SamplingParams(
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty,
        repetition_penalty=repetition_penalty,
        skip_special_tokens=skip_special_tokens,
        spaces_between_special_tokens=spaces_between_special_tokens,
        n=n,
        min_new_tokens=min_new_tokens,
        ignore_eos=ignore_eos,
        no_stop_trim=no_stop_trim,
    )
    if stop:
        params.stop.extend(stop)
    if stop_token_ids:
        params.stop_token_ids.extend(stop_token_ids)
    if max_new_tokens is not None:
        params.max_new_tokens = max_new_tokens
    if stream_interval is not None:
        params.stream_interval = stream_interval
    if constraint is not None:
        setattr(params, constraint.proto_field, constraint.value)
    if logit_bias:
        params.logit_bias.update(logit_bias)
    if custom_params:
        custom = struct_pb2.Struct()
        custom.update(dict(custom_params))
        params.custom_params.CopyFrom(custom)
    return params


def build_generate_request(
    *,
    request_id: str,
    input_ids: Sequence[int],
    sampling_params: pb.SamplingParams,
    original_text: str = "",
    stream: bool = True,
    return_logprob: bool = False,
    top_logprobs_num: int = 0,
    prompt_logprobs_start: int | None = None,
    token_ids_logprob: Sequence[int] = (),
    require_reasoning: bool = False,
    data_parallel_rank: int | None = None,
    lora_id: str = "",
) -> pb.GenerateRequest:
    """A ``GenerateRequest`` for token ids ``input_ids`` (``original_text`` is informational).

    Logprobs of the prompt are only computed when ``prompt_logprobs_start`` is given (position
    to start from, usually 0); otherwise ``logprob_start_len`` is -1 because the worker takes 0
    literally as "from the first prompt token". ``top_logprobs_num`` > 0 implies
    ``return_logprob``.
    """
    if not request_id:
        raise InvalidSamplingParams("request_id must not be empty")
    if not input_ids:
        raise InvalidSamplingParams("input_ids must not be empty")
    _check(top_logprobs_num >= 0, "top_logprobs_num", top_logprobs_num, "must be >= 0")
    if prompt_logprobs_start is not None:
        _check(
            0 <= prompt_logprobs_start < len(input_ids),
            "prompt_logprobs_start",
            prompt_logprobs_start,
            f"must be a prompt position (prompt has {len(input_ids)} tokens)",
        )
    wants_logprobs = return_logprob or top_logprobs_num > 0 or prompt_logprobs_start is not None
    request = pb.GenerateRequest(
        request_id=request_id,
        return_logprob=wants_logprobs,
        logprob_start_len=-1 if prompt_logprobs_start is None else prompt_logprobs_start,
        top_logprobs_num=top_logprobs_num,
        stream=stream,
        require_reasoning=require_reasoning,
        lora_id=lora_id,
    )
    # Sub-messages are filled in place: building them apart and passing them in copies them.
    tokenized = request.tokenized
    tokenized.original_text = original_text
    try:
        tokenized.input_ids.extend(input_ids)
    except (ValueError, TypeError) as exc:
        raise InvalidSamplingParams(f"input_ids must be token ids (>= 0): {exc}") from None
    request.sampling_params.CopyFrom(sampling_params)
    if token_ids_logprob:
        request.token_ids_logprob.extend(token_ids_logprob)
    if data_parallel_rank is not None:
        request.data_parallel_rank = data_parallel_rank
    return request
