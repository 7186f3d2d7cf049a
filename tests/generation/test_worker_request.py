"""Worker requests: SamplingParams shared by requests with the same settings, never changed."""

from __future__ import annotations

import msgspec
import pytest

from turnout.errors import ApiError
from turnout.generation.requests import ChatCompletionRequest
from turnout.generation.worker_request import sampling_params
from turnout.wire.sampling import Constraint, build_sampling_params


def _request(**fields: object) -> ChatCompletionRequest:
    body = {"messages": [{"role": "user", "content": "hi"}], **fields}
    return msgspec.convert(body, ChatCompletionRequest)


def test_requests_with_the_same_settings_share_one_message() -> None:
    first = sampling_params(_request(temperature=0), max_tokens=16, constraint=None)
    again = sampling_params(_request(temperature=0.0), max_tokens=16, constraint=None)
    assert again is first
    assert first == build_sampling_params(max_new_tokens=16, temperature=0.0)


@pytest.mark.parametrize(
    ("fields", "max_tokens", "constraint", "interval"),
    [
        ({"temperature": 0.5}, 16, None, None),
        ({"top_k": 5}, 16, None, None),
        ({"n": 2}, 16, None, None),
        ({"min_tokens": 3}, 16, None, None),
        ({"stop_token_ids": [7, 9]}, 16, None, None),
        ({"ignore_eos": True}, 16, None, None),
        ({"no_stop_trim": True}, 16, None, None),
        ({"skip_special_tokens": False}, 16, None, None),
        ({"spaces_between_special_tokens": False}, 16, None, None),
        ({"logit_bias": {"5": 1.5}}, 16, None, None),
        ({"seed": 42}, 16, None, None),
        ({}, 17, None, None),
        ({}, None, None, None),
        ({}, 16, Constraint("regex", "a+"), None),
        ({}, 16, None, 16),
    ],
)
def test_each_setting_makes_its_own_message(
    fields: dict[str, object],
    max_tokens: int | None,
    constraint: Constraint | None,
    interval: int | None,
) -> None:
    """Every field that reaches the message is part of what is shared: a message is reused
    only for requests it is right for."""
    request = _request(**fields)
    built = sampling_params(
        request, max_tokens=max_tokens, constraint=constraint, stream_interval=interval
    )
    plain = sampling_params(_request(), max_tokens=16, constraint=None)
    assert built != plain
    explicit = {k: v for k, v in fields.items() if k in ("temperature", "top_k")}
    expected = build_sampling_params(
        max_new_tokens=max_tokens,
        n=request.n,
        min_new_tokens=request.min_tokens or 0,
        stop_token_ids=list(request.stop_token_ids or ()),
        ignore_eos=request.ignore_eos,
        no_stop_trim=request.no_stop_trim,
        skip_special_tokens=request.skip_special_tokens,
        spaces_between_special_tokens=request.spaces_between_special_tokens,
        constraint=constraint,
        logit_bias=request.logit_bias,
        custom_params={"seed": request.seed} if request.seed is not None else None,
        stream_interval=interval,
        **explicit,  # type: ignore[arg-type]
    )
    assert built == expected


def test_a_value_the_wire_cannot_carry_is_a_400_every_time() -> None:
    for _ in range(2):  # a failure is not remembered as an answer
        with pytest.raises(ApiError) as caught:
            sampling_params(_request(temperature=1e39), max_tokens=16, constraint=None)
        assert caught.value.status == 400
