"""Request types: decoding alone refuses bad values with a 400 that names the field."""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from turnout.embeddings import EmbeddingRequest
from turnout.errors import ApiError
from turnout.generation.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequestBody,
)
from turnout.server.protocol import decode_body, read_body

MESSAGES = [{"role": "user", "content": "x"}]


def chat(**extra: Any) -> tuple[type[Any], dict[str, Any]]:
    return ChatCompletionRequest, {"messages": MESSAGES, **extra}


def completion(**extra: Any) -> tuple[type[Any], dict[str, Any]]:
    return CompletionRequest, {"prompt": "x", **extra}


def generate(**extra: Any) -> tuple[type[Any], dict[str, Any]]:
    return GenerateRequestBody, {"text": "x", **extra}


def sampling(**params: Any) -> tuple[type[Any], dict[str, Any]]:
    return generate(sampling_params=params)


@pytest.mark.parametrize(
    ("case", "param"),
    [
        # Integers beyond what the wire types carry.
        (chat(max_tokens=2**63), "max_tokens"),
        (chat(top_k=2**31), "top_k"),
        (chat(seed=2**64), "seed"),
        (chat(stop_token_ids=[2**32]), "stop_token_ids[0]"),
        (sampling(max_new_tokens=2**40), "sampling_params.max_new_tokens"),
        # Ranges (SGLang's, where OpenAI and SGLang differ).
        (chat(top_k=0), "top_k"),
        (chat(top_k=-2), "top_k"),
        (chat(temperature=-0.5), "temperature"),
        (chat(top_p=0), "top_p"),
        (chat(min_p=1.5), "min_p"),
        (chat(presence_penalty=2.5), "presence_penalty"),
        (chat(repetition_penalty=0), "repetition_penalty"),
        (chat(n=0), "n"),
        (chat(n=129), "n"),
        (chat(max_tokens=0), "max_tokens"),
        (chat(max_completion_tokens=0), "max_completion_tokens"),
        (chat(min_tokens=9, max_tokens=3), "min_tokens"),
        (chat(min_tokens=9, max_completion_tokens=3), "min_tokens"),
        (chat(stop=[str(i) for i in range(17)]), "stop"),
        (chat(stop=""), "stop"),
        (chat(stop_token_ids=[-1]), "stop_token_ids[0]"),
        (chat(logit_bias={"x": 1}), "logit_bias"),
        (chat(logit_bias={"9" * 5000: 1}), "logit_bias"),
        (chat(logit_bias={"5": 101}), "logit_bias[...]"),
        (chat(logprobs=True, top_logprobs=21), "top_logprobs"),
        (chat(top_logprobs=3), "top_logprobs"),
        (chat(messages=[]), "messages"),
        ((ChatCompletionRequest, {}), "messages"),
        # chat_template_kwargs must not replace what turnout passes to the template.
        (chat(chat_template_kwargs={"tools": 5}), "chat_template_kwargs.tools"),
        (chat(chat_template_kwargs={"messages": None}), "chat_template_kwargs.messages"),
        (chat(chat_template_kwargs={"chat_template": 5}), "chat_template_kwargs.chat_template"),
        # Completions prompts.
        (completion(prompt=[-1]), "prompt[0]"),
        (completion(prompt=[2**32]), "prompt[0]"),
        (completion(prompt=[[1], []]), "prompt[1]"),
        (completion(prompt=[]), "prompt"),
        (completion(prompt=[1.5]), "prompt[0]"),
        (completion(logprobs=21), "logprobs"),
        # /generate.
        (generate(input_ids=[-5], text=None), "input_ids[0]"),
        (generate(input_ids=[[1], 2], text=None), "input_ids"),
        (generate(input_ids=[1]), "text"),
        ((GenerateRequestBody, {}), "text"),
        (generate(top_logprobs_num=21), "top_logprobs_num"),
        (sampling(top_k=0), "sampling_params.top_k"),
        (sampling(min_new_tokens=5, max_new_tokens=2), "sampling_params.min_new_tokens"),
        (completion(truncate_prompt_tokens=0), "truncate_prompt_tokens"),
        (completion(truncate_prompt_tokens=-2), "truncate_prompt_tokens"),
        (chat(prompt_logprobs=21), "prompt_logprobs"),
    ],
)
def test_bad_values_are_a_400_naming_the_field(
    case: tuple[type[Any], dict[str, Any]], param: str
) -> None:
    assert refusal(case) == (400, param, "invalid_value")


def refusal(case: tuple[type[Any], dict[str, Any]]) -> tuple[int, str | None, str | None]:
    kind, body = case
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(ApiError) as caught:
        decode_body(json.dumps(body).encode(), kind)
    error = caught.value
    assert error.message
    return error.status, error.param, error.code


@pytest.mark.parametrize(
    ("case", "param"),
    [
        (sampling(max_tokens=5), "sampling_params.max_tokens"),  # OpenAI's name is not SGLang's
        (sampling(stream=True), "sampling_params.stream"),
        (chat(temprature=0.5), "temprature"),
        (chat(guided_json={}), "guided_json"),  # vLLM's, not implemented
        (completion(max_completion_tokens=5), "max_completion_tokens"),  # chat's only
        (chat(truncate_prompt_tokens=5), "truncate_prompt_tokens"),  # completions' only
        ((EmbeddingRequest, {"input": "x", "normalize": True}), "normalize"),
    ],
)
def test_unknown_fields_are_unsupported_parameters(
    case: tuple[type[Any], dict[str, Any]], param: str
) -> None:
    assert refusal(case) == (400, param, "unsupported_parameter")


def test_numbers_beyond_a_double_are_refused() -> None:
    with pytest.raises(ApiError) as caught:
        decode_body(b'{"prompt": "x", "temperature": 1e400}', CompletionRequest)
    assert caught.value.param == "temperature"


@pytest.mark.parametrize(
    ("case", "check"),
    [
        (chat(top_k=-1, temperature=0, max_tokens=2**31 - 1), lambda r: r.top_k == -1),
        (chat(seed=-(2**63), logit_bias={"5": -100}), lambda r: r.seed == -(2**63)),
        (sampling(max_new_tokens=0), lambda r: r.sampling_params.max_tokens == 0),
        (sampling(json_schema={"type": "object"}), lambda r: r.sampling_params.json_schema),
        (generate(input_ids=[[1, 2], [3]], text=None), lambda r: r.input_ids == [[1, 2], [3]]),
        (completion(prompt=["a", "b"]), lambda r: r.prompt == ["a", "b"]),
        (chat(chat_template_kwargs={"enable_thinking": False}), lambda r: r.chat_template_kwargs),
    ],
)
def test_good_values_decode(case: tuple[type[Any], dict[str, Any]], check: Any) -> None:
    kind, body = case
    body = {k: v for k, v in body.items() if v is not None}
    assert check(decode_body(json.dumps(body).encode(), kind))


@pytest.mark.parametrize("kind", [ChatCompletionRequest, CompletionRequest, GenerateRequestBody])
def test_deep_nesting_and_junk_are_400s(kind: type[Any]) -> None:
    deep = b'{"messages": [{"role": "user", "content": [{"type": "text", "x": ' + (
        b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}]}]}"
    )
    for body in (deep, b"[" * 5000 + b"]" * 5000, b"{", b"", b"null", b'"x"'):
        with pytest.raises(ApiError) as caught:
            decode_body(body, kind)
        assert caught.value.status == 400


def receiving(*messages: dict[str, Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    """An ASGI ``receive`` that hands out ``messages`` in order."""
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


def piece(body: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


@given(st.binary(max_size=64), st.lists(st.integers(0, 64), max_size=6))
async def test_read_body_joins_the_pieces_into_the_whole_body(body: bytes, cuts: list[int]) -> None:
    bounds = sorted({0, len(body), *(min(cut, len(body)) for cut in cuts)})
    pieces = [body[a:b] for a, b in itertools.pairwise(bounds)] or [b""]
    messages = [piece(p, more=True) for p in pieces[:-1]] + [piece(pieces[-1])]
    assert await read_body(receiving(*messages), 64) == body


async def test_read_body_refuses_one_byte_over_the_limit() -> None:
    assert await read_body(receiving(piece(b"ab", True), piece(b"c")), 3) == b"abc"
    with pytest.raises(ApiError) as refused:
        await read_body(receiving(piece(b"ab", True), piece(b"cd")), 3)
    assert (refused.value.status, refused.value.code) == (413, "request_too_large")


async def test_read_body_of_a_client_that_left_is_a_400() -> None:
    with pytest.raises(ApiError) as refused:
        await read_body(receiving(piece(b"ab", True), {"type": "http.disconnect"}), 10)
    assert (refused.value.status, refused.value.code) == (400, "client_disconnected")
