"""Bodies generated from the served OpenAPI document's request schemas are bodies the router
takes: a large majority is answered 2xx (the rest break rules no JSON schema can state, such
as unique tool names), none gets a 5xx, and every one is valid under the document."""

from __future__ import annotations

import collections
import copy
import json
import shutil
from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.support import bearer
from turnout.demo_model import path as demo_path

from .harness import MODEL, Router, run_router
from .schema_strategies import from_schema

#: Route → least share of generated bodies answered 2xx. What no JSON schema can state is the
#: rest: unique tool names, a named tool among the tools (more often met by Anthropic's
#: bodies, whose tool choice is an object).
ROUTES = {
    "/v1/chat/completions": 0.8,
    "/v1/completions": 0.8,
    "/v1/embeddings": 0.8,
    "/v1/responses": 0.8,
    "/generate": 0.8,
    "/v1/tokenize": 0.8,
    "/v1/messages": 0.65,
}
#: Fields that name objects kept by the server (a random id names none: a 404), left out.
STORED_REFERENCES = {"ResponsesRequest": ("previous_response_id", "conversation")}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    """The demo model with a context of 512 tokens: generated bodies ask for the most tokens
    of every choice and ignore EOS, which the demo's 8192 would make minutes of output."""
    model = tmp_path_factory.mktemp("model") / "small-demo"
    shutil.copytree(demo_path(), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 512}))
    with run_router(
        model_dir=model, model={"tool_parser": "qwen", "reasoning_parser": "qwen3"}
    ) as running:
        for sim in running.sims:
            sim.knobs.update({"tokens_per_chunk": 64})
        yield running


def bodies(document: dict[str, Any], path: str) -> st.SearchStrategy[Any]:
    """Request bodies of ``path`` as its documented schema admits them."""
    trimmed = copy.deepcopy(document)
    schemas = trimmed["components"]["schemas"]
    for name, fields in STORED_REFERENCES.items():
        for field in fields:
            schemas[name]["properties"].pop(field)
    body = trimmed["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    return from_schema(body["schema"], trimmed)


def post_generated(
    document: dict[str, Any], http: httpx.Client, path: str, examples: int
) -> collections.Counter[int]:
    """Post ``examples`` generated bodies; the count of each answer status."""
    statuses: collections.Counter[int] = collections.Counter()
    schema = document["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    validator = jsonschema.Draft202012Validator(
        {**schema["schema"], "components": document["components"]}
    )
    refused: list[str] = []

    @settings(
        max_examples=examples,
        database=None,
        # The same bodies every run: the share accepted is a property of the document, not
        # of a draw (a random 30 of them once fell to 77%).
        derandomize=True,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(bodies(document, path))
    def post(body: Any) -> None:
        validator.validate(body)
        answer = http.post(path, json=body)
        assert answer.status_code < 500, (body, answer.text)
        statuses[answer.status_code] += 1
        if answer.status_code >= 300:
            refused.append(answer.text[:200])

    post()
    accepted = sum(n for status, n in statuses.items() if status < 300)
    assert accepted >= ROUTES[path] * sum(statuses.values()), (path, statuses, refused)
    return statuses


def test_the_document_names_what_the_server_serves(document: dict[str, Any]) -> None:
    """The served model, token ids within its vocabulary (3000 tokens), and at most half its
    context (512 tokens) for min_tokens."""
    chat = document["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert chat["model"]["anyOf"][0] == {"enum": [MODEL]}
    completion = document["components"]["schemas"]["CompletionRequest"]["properties"]
    ids = completion["prompt"]["anyOf"][1]
    assert ids["items"] == {"type": "integer", "minimum": 0, "maximum": 2999}
    assert completion["min_tokens"]["anyOf"][0]["maximum"] == 256


@pytest.mark.parametrize("path", ROUTES)
def test_generated_bodies_are_taken(
    document: dict[str, Any], http: httpx.Client, path: str
) -> None:
    post_generated(document, http, path, examples=50)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a few of /generate's bodies are hundreds of choices
@pytest.mark.parametrize("path", ROUTES)
def test_many_generated_bodies_are_taken(
    document: dict[str, Any], http: httpx.Client, path: str
) -> None:
    post_generated(document, http, path, examples=300)


def test_the_document_names_only_the_models_of_the_key() -> None:
    """Behind keys the document is a serving route, and names the models the caller's tenant
    may use (for a tenant allowed none, no model name at all)."""
    tenants = {
        "demo": {"keys": ["key-demo"], "models": ["turnout-*"]},
        "other": {"keys": ["key-other"], "models": ["elsewhere/*"]},
    }
    config = {"server": {"api_keys": ["plain"]}, "tenants": tenants}
    with run_router(config=config, sims=1) as running:
        url = f"{running.base_url}/openapi.json"
        assert httpx.get(url, timeout=30).status_code == 401
        for key, names in [("plain", [MODEL]), ("key-demo", [MODEL]), ("key-other", [])]:
            answer = httpx.get(url, headers=bearer(key), timeout=30)
            assert answer.status_code == 200, answer.text
            schemas = answer.json()["components"]["schemas"]
            model = schemas["ChatCompletionRequest"]["properties"]["model"]
            assert [b.get("enum") for b in model["anyOf"] if "enum" in b] == (
                [names] if names else []
            ), key
            assert (MODEL in answer.text) is bool(names)


def test_the_document_names_the_adapters_and_aliases() -> None:
    """``model`` takes the model, its aliases and ``<model>:<adapter>``; ``lora_path`` the
    adapters; and a body naming one of them is taken."""
    with run_router(
        sims=1,
        sim_kwargs={"lora_adapters": ["sql=/adapters/sql"]},
        model={"adapters": ["configured"], "aliases": ["demo-alias"]},
    ) as running:
        url = running.base_url
        running.wait_until(lambda: "sql" in httpx.get(f"{url}/openapi.json", timeout=30).text)
        schemas = httpx.get(f"{url}/openapi.json", timeout=30).json()["components"]["schemas"]
        properties = schemas["CompletionRequest"]["properties"]
        assert properties["model"]["anyOf"][0]["enum"] == [
            MODEL,
            "demo-alias",
            f"{MODEL}:configured",
            f"{MODEL}:sql",
        ]
        adapters = properties["lora_path"]["anyOf"][0]["anyOf"][0]
        assert adapters == {"enum": ["configured", "sql"]}
        for body in ({"model": f"{MODEL}:sql"}, {"lora_path": "sql"}, {"model": "demo-alias"}):
            answer = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", **body}, timeout=30)
            assert answer.status_code == 200, answer.text
