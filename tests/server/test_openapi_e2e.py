"""``GET /openapi.json``: Litestar's schema of the routes, with the real request bodies (the JSON
routes read raw bytes) and the error body, usable by clients and schema fuzzers."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest

from .conftest import MODEL
from .harness import Router

BODIES = {
    "/v1/chat/completions": "ChatCompletionRequest",
    "/v1/completions": "CompletionRequest",
    "/v1/responses": "ResponsesRequest",
    "/generate": "GenerateRequestBody",
    "/v1/embeddings": "EmbeddingRequest",
    "/v1/tokenize": "TokenizeRequest",
    "/v1/detokenize": "DetokenizeRequest",
    "/parse/function_call": "ParseFunctionCallRequest",
    "/parse/reasoning": "ParseReasoningRequest",
}


@pytest.fixture(scope="module")
def schema(router: Router) -> dict[str, Any]:
    response = httpx.get(f"{router.base_url}/openapi.json", timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    document: dict[str, Any] = response.json()
    return document


def body_validator(schema: dict[str, Any], path: str) -> jsonschema.protocols.Validator:
    ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    document = {**ref, "components": schema["components"]}
    return jsonschema.Draft202012Validator(document)


def test_every_json_route_documents_its_request_body(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.1")
    assert schema["info"]["title"] == "turnout"
    for path, component in BODIES.items():
        body = schema["paths"][path]["post"]["requestBody"]
        assert body["required"] is True
        assert body["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{component}"
        }
        assert component in schema["components"]["schemas"]
    # Bodies of types without required fields may be left out (read as {}).
    for path in ("/v1/conversations", "/admin/flush_cache", "/admin/stop_profile"):
        assert schema["paths"][path]["post"]["requestBody"]["required"] is False
    assert schema["paths"]["/admin/load_lora_adapter"]["post"]["requestBody"]["required"] is True
    # The worker admin route's body comes from Litestar itself.
    assert "requestBody" in schema["paths"]["/workers"]["post"]


def test_errors_are_documented_in_the_shape_they_are_answered(schema: dict[str, Any]) -> None:
    for path, operations in schema["paths"].items():
        anthropic = path.startswith("/v1/messages")
        name = "AnthropicError" if anthropic else "ErrorResponse"
        error = {"$ref": f"#/components/schemas/{name}"}
        for method, operation in operations.items():
            responses = operation["responses"]
            assert responses["default"]["content"]["application/json"]["schema"] == error
            statuses = {status for status in responses if status[0] in "45"}
            assert {"400", "404", "503"} <= statuses, (path, method)
            assert ("401" in statuses) is (path not in ("/health", "/liveness", "/readiness"))
            assert ("413" in statuses) is ("requestBody" in operation), (path, method)
            for status in statuses:
                assert responses[status]["content"]["application/json"]["schema"] == error


@pytest.mark.parametrize(
    ("path", "body", "valid"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, True),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                  "top_k": 2**31}, False),
        ("/v1/chat/completions", {"messages": []}, False),
        ("/v1/chat/completions", {"messages": [{"role": "user"}], "stop": [""]}, False),
        ("/v1/completions", {"prompt": [[1, 2], [3]], "logprobs": 5}, True),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 4}, True),
        ("/v1/responses", {"input": [{"role": "user", "content": "hi"}]}, True),
        ("/v1/responses", {"input": 5}, False),
        ("/v1/responses", {"input": "hi", "max_output_tokens": 0}, False),
        ("/v1/responses", {"input": "hi", "temperature": 3}, False),
        ("/v1/responses", {"max_output_tokens": 4}, False),
        ("/v1/completions", {"prompt": [-1]}, False),
        ("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 0}}, True),
        ("/generate", {"text": "x", "sampling_params": {"max_tokens": 5}}, False),
        ("/generate", {"input_ids": [2**32]}, False),
        ("/v1/embeddings", {"input": ["a", [1, 2]], "encoding_format": "base64"}, True),
        ("/v1/embeddings", {"input": [[]]}, False),
        ("/v1/embeddings", {"input": "x", "encoding_format": "int8"}, False),
        ("/v1/embeddings", {"input": "x", "dimensions": 0}, False),
        ("/v1/tokenize", {"model": 5, "prompt": "x"}, False),
        ("/parse/function_call", {"text": "x", "tools": 5}, False),
    ],
)  # fmt: skip
def test_the_documented_bodies_are_the_ones_the_router_decodes(
    router: Router, schema: dict[str, Any], path: str, body: dict[str, Any], valid: bool
) -> None:
    """The schema and the router agree on these bodies: what the schema refuses is a 400."""
    assert body_validator(schema, path).is_valid(body) is valid
    response = httpx.post(f"{router.base_url}{path}", json={"model": MODEL, **body}, timeout=30)
    if not valid:
        assert response.status_code == 400, response.text


def test_nothing_else_is_served_under_the_schema_path(router: Router) -> None:
    for path in ("/openapi.json/x", "/openapi.json/x.json", "/schema"):
        response = httpx.get(f"{router.base_url}{path}", timeout=10)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_the_kept_response_routes_are_documented(schema: dict[str, Any]) -> None:
    paths = schema["paths"]
    assert set(paths["/v1/responses/{response_id}"]) == {"get", "delete"}
    assert "get" in paths["/v1/responses/{response_id}/input_items"]
    assert "post" in paths["/v1/responses/{response_id}/cancel"]
    assert paths["/v1/responses"]["post"]["summary"]


def test_every_operation_declares_the_key_it_takes(schema: dict[str, Any]) -> None:
    scheme = schema["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            public = path in ("/health", "/liveness", "/readiness")
            assert operation["security"] == ([] if public else [{"bearer": []}]), path


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses",
                                  "/generate"])  # fmt: skip
def test_streaming_routes_document_server_sent_events(schema: dict[str, Any], path: str) -> None:
    content = schema["paths"][path]["post"]["responses"]["200"]["content"]
    assert set(content) == {"application/json", "text/event-stream"}


def test_the_documented_embeddings_answer_is_the_one_given(
    router: Router, schema: dict[str, Any]
) -> None:
    operation = schema["paths"]["/v1/embeddings"]["post"]
    ref = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ref == {"$ref": "#/components/schemas/EmbeddingResponse"}
    validator = jsonschema.Draft202012Validator({**ref, "components": schema["components"]})
    for encoding in ("float", "base64"):
        body = {"model": MODEL, "input": ["a", [1, 2]], "encoding_format": encoding}
        answer = httpx.post(f"{router.base_url}/v1/embeddings", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        validator.validate(answer.json())


def test_boolean_query_parameters_say_how_they_are_written(schema: dict[str, Any]) -> None:
    for path, method, name in [
        ("/v1/responses/{response_id}", "get", "stream"),
        ("/workers/{worker_id}", "delete", "wait"),
    ]:
        [parameter] = [p for p in schema["paths"][path][method]["parameters"] if p["name"] == name]
        assert parameter["in"] == "query"
        assert "true, false, 1 or 0" in parameter["description"]
