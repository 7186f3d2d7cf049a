"""The answers the served OpenAPI document declares are the answers the router gives: every
operation declares a real schema for its success and its errors, and real answers (JSON and
each event of a stream) validate against them."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from .conftest import MODEL, TOOLS

PUBLIC = {"/health", "/liveness", "/readiness"}


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({**schema, "components": document["components"]})


def _operation(document: dict[str, Any], path: str, method: str) -> dict[str, Any]:
    found: dict[str, Any] = document["paths"][path][method]
    return found


def _success(operation: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    [(status, answer)] = [(s, a) for s, a in operation["responses"].items() if s.startswith("2")]
    return status, answer["content"]


def check_answer(document: dict[str, Any], path: str, method: str, answer: httpx.Response) -> None:
    """``answer`` (JSON or an event stream) is what the document declares for its status."""
    operation = _operation(document, path, method)
    status = str(answer.status_code)
    if status.startswith("2"):
        declared, content = _success(operation)
        assert status == declared, (path, method, answer.text)
    else:
        content = operation["responses"][status]["content"]
    if answer.headers["content-type"].startswith("text/event-stream"):
        validator = _validator(document, content["text/event-stream"]["x-data-schema"])
        events = _events(answer.text)
        assert events, answer.text
        for event in events:
            validator.validate(event)
    else:
        _validator(document, content["application/json"]["schema"]).validate(answer.json())


def _events(text: str) -> list[Any]:
    return [
        json.loads(line.removeprefix("data: "))
        for line in text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def test_every_operation_declares_a_real_answer(document: dict[str, Any]) -> None:
    """A non-empty JSON schema for the success of every operation (not ``{}`` nor a bare
    string), resolvable in the document; the streaming routes also declare their events."""
    assert len(document["paths"]) > 30
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            _, content = _success(operation)
            schema = content["application/json"]["schema"]
            assert schema, (path, method)
            assert schema.get("type") != "string", (path, method, schema)
            jsonschema.Draft202012Validator.check_schema(schema)
            _validator(document, schema).is_valid({})  # every reference resolves
            if "text/event-stream" in content:
                assert content["text/event-stream"]["x-data-schema"], (path, method)
    for path in ("/v1/chat/completions", "/v1/completions", "/generate", "/v1/responses",
                 "/v1/messages"):  # fmt: skip
        assert set(_success(_operation(document, path, "post"))[1]) == {
            "application/json",
            "text/event-stream",
        }


def test_chat_answers_and_stream_chunks_validate(
    document: dict[str, Any], http: httpx.Client
) -> None:
    path = "/v1/chat/completions"
    user = {"role": "user", "content": "hi"}
    for body in [
        {"messages": [user], "max_tokens": 5, "logprobs": True, "top_logprobs": 2},
        {"messages": [{"role": "user", "content": "weather please"}], "tools": TOOLS},
        {"messages": [{"role": "user", "content": "ponder"}], "n": 2},
        {"messages": [user], "stream": True, "stream_options": {"include_usage": True}},
        {"messages": [{"role": "user", "content": "weather"}], "tools": TOOLS, "stream": True},
        {"messages": [{"role": "user", "content": "ponder"}], "stream": True, "logprobs": True},
    ]:
        answer = http.post(path, json={"model": MODEL, **body})
        assert answer.status_code == 200, answer.text
        check_answer(document, path, "post", answer)


def test_completion_and_generate_answers_validate(
    document: dict[str, Any], http: httpx.Client
) -> None:
    for path, body in [
        ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "logprobs": 2, "echo": True}),
        ("/v1/completions", {"prompt": ["hi", [1, 2]], "max_tokens": 3, "stream": True}),
        ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3}}),
        ("/generate", {"text": ["a", "b"], "return_logprob": True}),
        ("/generate", {"input_ids": [1, 2], "stream": True}),
    ]:
        answer = http.post(path, json={"model": MODEL, **body})
        assert answer.status_code == 200, answer.text
        check_answer(document, path, "post", answer)


def test_embeddings_models_and_probes_validate(
    document: dict[str, Any], http: httpx.Client
) -> None:
    for encoding in ("float", "base64"):
        body = {"model": MODEL, "input": ["a", [1, 2]], "encoding_format": encoding}
        check_answer(document, "/v1/embeddings", "post", http.post("/v1/embeddings", json=body))
    for path, url in [
        ("/v1/models", "/v1/models"),
        ("/v1/models/{model_id}", f"/v1/models/{MODEL}"),
        ("/health", "/health"),
        ("/liveness", "/liveness"),
        ("/readiness", "/readiness"),
        ("/get_model_info", "/get_model_info"),
        ("/get_server_info", "/get_server_info"),
        ("/health_generate", "/health_generate"),
        ("/workers", "/workers"),
    ]:
        answer = http.get(url)
        assert answer.status_code == 200, answer.text
        check_answer(document, path, "get", answer)
    [worker, *_] = http.get("/workers").json()["workers"]
    check_answer(document, "/workers/{worker_id}", "get", http.get(f"/workers/{worker['id']}"))
    for path, body in [
        ("/v1/tokenize", {"prompt": "hello there"}),
        ("/v1/tokenize", {"prompt": ["a", "b c"]}),
        ("/v1/detokenize", {"tokens": [1, 2, 3]}),
        ("/v1/detokenize", {"tokens": [[1, 2], [3]]}),
        ("/parse/reasoning", {"text": "<think>a</think>b", "reasoning_parser": "qwen3"}),
        ("/parse/function_call", {"text": "x", "tool_call_parser": "qwen", "tools": TOOLS}),
        ("/admin/flush_cache", {}),
    ]:
        answer = http.post(path, json={"model": MODEL, **body} if "admin" not in path else body)
        assert answer.status_code == 200, answer.text
        check_answer(document, path, "post", answer)


def test_responses_and_conversations_answers_validate(
    document: dict[str, Any], http: httpx.Client
) -> None:
    function = TOOLS[0]["function"]
    tool = {"type": "function", "name": function["name"], "parameters": function["parameters"]}
    created = http.post(
        "/v1/responses", json={"model": MODEL, "input": "plan ahead", "tools": [tool]}
    )
    assert created.status_code == 200, created.text
    check_answer(document, "/v1/responses", "post", created)
    kept = f"/v1/responses/{created.json()['id']}"
    for path, method, url in [
        ("/v1/responses/{response_id}", "get", kept),
        ("/v1/responses/{response_id}/input_items", "get", f"{kept}/input_items"),
        ("/v1/responses/{response_id}", "delete", kept),
    ]:
        answer = http.request(method.upper(), url)
        assert answer.status_code == 200, answer.text
        check_answer(document, path, method, answer)
    streamed = http.post("/v1/responses", json={"model": MODEL, "input": "ponder", "stream": True})
    check_answer(document, "/v1/responses", "post", streamed)

    items = [{"type": "message", "role": "user", "content": "hi"}]
    conversation = http.post("/v1/conversations", json={"items": items, "metadata": {"a": "b"}})
    check_answer(document, "/v1/conversations", "post", conversation)
    base = f"/v1/conversations/{conversation.json()['id']}"
    added = http.post(f"{base}/items", json={"items": items})
    check_answer(document, "/v1/conversations/{conversation_id}/items", "post", added)
    item = added.json()["data"][0]["id"]
    for path, method, url in [
        ("/v1/conversations/{conversation_id}", "get", base),
        ("/v1/conversations/{conversation_id}/items", "get", f"{base}/items"),
        ("/v1/conversations/{conversation_id}/items/{item_id}", "get", f"{base}/items/{item}"),
        ("/v1/conversations/{conversation_id}/items/{item_id}", "delete", f"{base}/items/{item}"),
        ("/v1/conversations/{conversation_id}", "delete", base),
    ]:
        answer = http.request(method.upper(), url)
        assert answer.status_code == 200, answer.text
        check_answer(document, path, method, answer)


def test_anthropic_answers_validate(document: dict[str, Any], http: httpx.Client) -> None:
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "ponder"}]}
    for extra in ({}, {"stream": True}):
        answer = http.post("/v1/messages", json={**body, **extra})
        assert answer.status_code == 200, answer.text
        check_answer(document, "/v1/messages", "post", answer)
    counted = http.post(
        "/v1/messages/count_tokens", json={"model": MODEL, "messages": body["messages"]}
    )
    check_answer(document, "/v1/messages/count_tokens", "post", counted)
    refused = http.post("/v1/messages", json={**body, "max_tokens": 0})
    assert refused.status_code == 400
    check_answer(document, "/v1/messages", "post", refused)


@pytest.mark.parametrize(
    "case",
    [
        ("/v1/chat/completions", "post", "/v1/chat/completions", {"messages": []}, 400),
        ("/v1/chat/completions", "post", "/v1/chat/completions",
         {"model": "nope", "messages": [{"role": "user", "content": "hi"}]}, 404),
        ("/v1/completions", "post", "/v1/completions", {"prompt": "x", "n": 0}, 400),
        ("/v1/embeddings", "post", "/v1/embeddings", {"input": "x", "dimensions": 8}, 400),
        ("/v1/responses/{response_id}", "get", "/v1/responses/resp_none", None, 404),
        ("/workers/{worker_id}", "get", "/workers/none", None, 404),
        ("/v1/models/{model_id}", "get", "/v1/models/none", None, 404),
    ],
)  # fmt: skip
def test_error_answers_validate(
    document: dict[str, Any],
    http: httpx.Client,
    case: tuple[str, str, str, dict[str, Any] | None, int],
) -> None:
    path, method, url, body, status = case
    answer = http.request(method.upper(), url, json=body)
    assert answer.status_code == status, answer.text
    check_answer(document, path, method, answer)
    assert set(answer.json()["error"]) == {"message", "type", "param", "code"}
