"""Bad input over real sockets: every case is a 4xx with an OpenAI error body and a string code,
never a 500 — and the router serves a normal request afterwards."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import MODEL
from .harness import Router

MESSAGES = [{"role": "user", "content": "hi"}]
JSON_ROUTES = [
    "/v1/chat/completions",
    "/v1/completions",
    "/generate",
    "/v1/embeddings",
    "/v1/tokenize",
    "/v1/detokenize",
    "/parse/function_call",
    "/parse/reasoning",
    "/workers",
]


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": MESSAGES, **extra}


def assert_openai_error(response: httpx.Response, status: int | None = None) -> dict[str, Any]:
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    if status is not None:
        assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["code"], str)
    assert error["code"]
    assert isinstance(error["message"], str)
    assert error["message"]
    return dict(error)


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        # Integers beyond the wire types.
        ("/v1/chat/completions", chat(max_tokens=2**63), "max_tokens"),
        ("/v1/chat/completions", chat(top_k=2**31), "top_k"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 2**64}, "max_tokens"),
        ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2**40}},
         "sampling_params.max_new_tokens"),
        # chat_template_kwargs replacing what turnout passes to the template.
        ("/v1/chat/completions", chat(chat_template_kwargs={"tools": 5}),
         "chat_template_kwargs.tools"),
        ("/v1/chat/completions", chat(chat_template_kwargs={"messages": "x"}),
         "chat_template_kwargs.messages"),
        # Completions prompts.
        ("/v1/completions", {"prompt": [-1]}, "prompt[0]"),
        ("/v1/completions", {"prompt": [2**32]}, "prompt[0]"),
        # /generate input ids.
        ("/generate", {"input_ids": [-5]}, "input_ids[0]"),
        ("/generate", {"input_ids": [[1], 2]}, "input_ids"),
        # Embeddings.
        ("/v1/embeddings", {"input": [-1]}, "input[0]"),
        ("/v1/embeddings", {"input": [[1], [2**32]]}, "input[1][0]"),
        ("/v1/embeddings", {"input": []}, "input"),
        ("/v1/embeddings", {"input": ["a", ""]}, "input[1]"),
        ("/v1/embeddings", {"input": [1, "a"]}, "input"),
        ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ("/v1/embeddings", {"input": "x", "dimensions": 0}, "dimensions"),
        ("/v1/embeddings", {"input": "x", "dimensions": 8}, "dimensions"),
        # Tokenize, detokenize, parse.
        ("/v1/tokenize", {"messages": None}, "prompt"),
        ("/v1/tokenize", {"messages": "hi"}, "messages"),
        ("/v1/tokenize", {"messages": [1, 2]}, "messages[0]"),
        ("/v1/tokenize", {"model": 5, "prompt": "hi"}, "model"),
        ("/v1/detokenize", {"model": 5, "tokens": [1]}, "model"),
        ("/v1/detokenize", {"tokens": [1, [2]]}, "tokens"),
        ("/parse/function_call", {"model": 5, "text": "hi"}, "model"),
        ("/parse/reasoning", {"model": [], "text": "hi"}, "model"),
        ("/parse/function_call", {"text": "hi", "tools": 5}, "tools"),
    ],
)  # fmt: skip
def test_bad_input_is_a_400_naming_the_field(
    router: Router, path: str, body: dict[str, Any], param: str
) -> None:
    response = httpx.post(f"{router.base_url}{path}", json=body, timeout=30)
    error = assert_openai_error(response, 400)
    assert error["param"] == param


def test_an_empty_completion_prompt_is_a_400(router: Router) -> None:
    response = httpx.post(f"{router.base_url}/v1/completions", json={"prompt": ""}, timeout=30)
    assert_openai_error(response, 400)


def _nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


@pytest.mark.parametrize("path", JSON_ROUTES)
def test_deeply_nested_json_is_a_400_on_every_route(router: Router, path: str) -> None:
    deep = _nested(5000)
    bodies = [
        b"[" * 5000 + b"]" * 5000,
        b'{"model": "m", "text": "x", "tools": [' + deep + b"]}",
        b'{"messages": [{"role": "user", "content": [{"type": "text", "x": ' + deep + b"}]}]}",
        b'{"url": "grpc://127.0.0.1:1", "labels": ' + deep + b"}",
    ]
    for body in bodies:
        response = httpx.post(
            f"{router.base_url}{path}",
            content=body,
            headers={"content-type": "application/json"},
            timeout=30,
        )
        assert_openai_error(response)
    assert httpx.get(f"{router.base_url}/health", timeout=10).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/no/such/route", 404, "not_found"),
        ("DELETE", "/health", 405, "method_not_allowed"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
        ("POST", "/workers/no-such-worker/drain", 404, None),
    ],
)
def test_framework_errors_have_the_same_shape_and_a_string_code(
    router: Router, method: str, path: str, status: int, code: str | None
) -> None:
    response = httpx.request(method, f"{router.base_url}{path}", timeout=10)
    error = assert_openai_error(response, status)
    if code is not None:
        assert error["code"] == code


def test_a_normal_request_is_served_after_bad_ones(router: Router) -> None:
    response = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=30)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"]


#: The demo model: a context of 8192 tokens and a vocabulary of 3000 (config.json).
MAX_INT32 = 2**31 - 1


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        # min_tokens beyond what the model can generate: the room the prompt leaves in the
        # context (without max_tokens, or with one beyond the context), the endpoint's default.
        ("/v1/chat/completions", chat(min_tokens=MAX_INT32), "min_tokens",
         "leaves in the model's context of 8192 tokens"),
        ("/v1/chat/completions", chat(min_tokens=8190, max_completion_tokens=9000), "min_tokens",
         "leaves in the model's context"),
        ("/v1/completions", {"prompt": "x", "min_tokens": 17}, "min_tokens",
         "must not exceed max_tokens (16 when not given)"),
        ("/generate", {"text": "x", "sampling_params": {"min_new_tokens": 129}},
         "sampling_params.min_new_tokens", "must not exceed max_new_tokens (128 when not given)"),
        ("/generate", {"text": "x", "sampling_params": {"min_new_tokens": MAX_INT32,
                                                         "max_new_tokens": MAX_INT32}},
         "sampling_params.min_new_tokens", "min_new_tokens (2147483647) is more than the 8191"),
        # logit_bias ids outside the vocabulary, named in the message.
        ("/v1/chat/completions", chat(logit_bias={"5": 1, "3000": -1}), "logit_bias",
         "token id 3000 is not in the model's vocabulary (ids 0 to 2999)"),
        ("/v1/completions", {"prompt": "x", "logit_bias": {"99999": 1}}, "logit_bias",
         "token id 99999"),
        ("/generate", {"text": "x", "sampling_params": {"logit_bias": {"123456": 2}}},
         "sampling_params.logit_bias", "token id 123456"),
    ],
)  # fmt: skip
def test_sampling_the_model_cannot_honour_is_a_400_before_any_worker(
    router: Router, path: str, body: dict[str, Any], param: str, says: str
) -> None:
    before = sum(len(sim.records.requests) for sim in router.sims)
    response = httpx.post(f"{router.base_url}{path}", json=body, timeout=30)
    error = assert_openai_error(response, 400)
    assert error["param"] == param
    assert error["code"] == "invalid_value"
    assert says in error["message"]
    assert sum(len(sim.records.requests) for sim in router.sims) == before


def test_sampling_within_the_model_is_served(router: Router) -> None:
    body = chat(min_tokens=2, max_tokens=3, logit_bias={"0": 1, "2999": -1})
    response = httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 200, response.text
    body = {"text": "x", "sampling_params": {"min_new_tokens": 2, "logit_bias": {"7": 1}}}
    response = httpx.post(f"{router.base_url}/generate", json=body, timeout=30)
    assert response.status_code == 200, response.text
