"""Fuzzing every JSON route over real sockets: bodies shaped like the request types (from the
served OpenAPI schema, at and beyond their bounds), the same with one field replaced by junk,
and plain junk. No answer may be a 5xx (nor a stream that ends in an internal error), every
error has the OpenAI shape with a string code, and a normal request is served afterwards.

The default run tries a few dozen bodies per route; ``-m slow`` tries many more.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnout.demo_model import path as demo_path

from .harness import MODEL, Router, run_router

#: Route → request body type (component of the served schema); None: no documented body.
ROUTES: dict[str, str | None] = {
    "/v1/chat/completions": "ChatCompletionRequest",
    "/v1/completions": "CompletionRequest",
    "/v1/responses": "ResponsesRequest",
    "/v1/conversations": "CreateConversation",
    "/generate": "GenerateRequestBody",
    "/v1/embeddings": "EmbeddingRequest",
    "/v1/tokenize": "TokenizeRequest",
    "/v1/detokenize": "DetokenizeRequest",
    "/parse/function_call": "ParseFunctionCallRequest",
    "/parse/reasoning": "ParseReasoningRequest",
    "/workers": None,  # junk only: a valid body would add a worker at a random address
}
#: Small context, so that whatever a valid body asks for stays quick to generate.
CONTEXT = 512
#: Integers beyond every wire type, at every sign.
BIG_INTS = [2**31, 2**32, 2**53 + 1, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**30)]

json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(BIG_INTS)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
junk = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        shutil.copytree(demo_path(), model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        config["max_position_embeddings"] = CONTEXT
        (model_dir / "config.json").write_text(json.dumps(config))
        with run_router(
            model_dir=model_dir,
            model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
            config={"server": {"request_timeout_s": 60}},
        ) as running:
            yield running


@pytest.fixture(scope="module")
def components(router: Router) -> dict[str, Any]:
    schema = httpx.get(f"{router.base_url}/openapi.json", timeout=30).json()
    found: dict[str, Any] = schema["components"]["schemas"]
    return found


names = st.sampled_from(["get_weather", "f", ""]) | st.text(max_size=6)
schema_like = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean"])}),
    lambda inner: (
        st.fixed_dictionaries(
            {"type": st.just("object"), "properties": st.dictionaries(names, inner, max_size=3)},
            optional={"required": st.lists(names, max_size=2)},
        )
        | st.fixed_dictionaries({"type": st.just("array"), "items": inner})
    ),
    max_leaves=5,
)
tool = st.fixed_dictionaries(
    {
        "type": st.just("function") | st.text(max_size=5),
        "function": st.fixed_dictionaries(
            {"name": names},
            optional={"description": st.text(max_size=10), "parameters": schema_like | junk},
        )
        | junk,
    }
)
tool_call = st.fixed_dictionaries(
    {
        "id": st.text(max_size=6),
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {
                "name": names,
                "arguments": st.sampled_from(['{"city": "Paris"}', "{", ""]) | st.text(max_size=8),
            }
        )
        | junk,
    }
)
part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_text"]) | st.text(max_size=5)},
    optional={"text": st.text(max_size=20), "image_url": junk},
)
#: A Responses API function tool (flat: the name beside the type).
flat_tool = st.fixed_dictionaries(
    {"type": st.just("function") | st.text(max_size=5), "name": names},
    optional={"description": st.text(max_size=10), "parameters": schema_like | junk},
)
replies = st.sampled_from(
    [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        '<tool_call>\n{"name": "f", "arguments": \n</tool_call>',
        "<think>why</think>so",
        "</think>",
        "<tool_call>",
    ]
)
#: Responses API input items.
input_item = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "developer", "assistant", "tool"])},
        optional={
            "type": st.just("message"),
            "content": st.text(max_size=20) | replies | st.lists(part, max_size=2) | junk,
        },
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": st.text(max_size=4), "name": names},
        optional={"arguments": st.sampled_from(['{"city": "Paris"}', "{"]) | junk},
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": st.text(max_size=4)},
        optional={"output": st.text(max_size=20) | st.lists(part, max_size=2) | junk},
    ),
    st.fixed_dictionaries(
        {"type": st.just("reasoning")},
        optional={
            "content": st.lists(
                st.fixed_dictionaries(
                    {"type": st.just("reasoning_text"), "text": st.text(max_size=10)}
                ),
                max_size=2,
            )
            | junk,
            "summary": junk,
            "encrypted_content": st.text(max_size=5),
        },
    ),
    junk,
)
text_format = st.sampled_from([{"type": "text"}, {"type": "json_object"}]) | st.fixed_dictionaries(
    {"type": st.just("json_schema"), "name": names},
    optional={"schema": schema_like | junk, "strict": st.booleans()},
)
#: OpenAI structures the request types leave as ``dict[str, Any]``: a fuzzer must know them to
#: get past the first check. Each is mixed with what the schema alone would give.
HINTS: dict[str, st.SearchStrategy[Any]] = {
    "model": st.just(MODEL),
    "role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]),
    "content": st.text(max_size=30) | replies | st.lists(part, max_size=3) | st.none(),
    "tools": st.lists(tool, max_size=3) | st.lists(flat_tool, max_size=3),
    # Responses items, and the strings and token ids embeddings take.
    "input": st.text(max_size=30)
    | st.lists(input_item, max_size=4)
    | st.lists(st.text(max_size=10), min_size=1, max_size=3)
    | st.lists(st.integers(0, 300), min_size=1, max_size=5),
    "reasoning": st.fixed_dictionaries(
        {}, optional={"effort": st.sampled_from(["low", "high"]) | junk, "summary": junk}
    ),
    "include": st.lists(
        st.sampled_from(["message.output_text.logprobs", "reasoning.encrypted_content"]),
        max_size=2,
    ),
    "tool_calls": st.lists(tool_call, max_size=2),
    "tool_choice": st.sampled_from(["auto", "none", "required"])
    | st.fixed_dictionaries(
        {"type": st.just("function"), "function": st.fixed_dictionaries({"name": names})}
    )
    | st.fixed_dictionaries({"type": st.just("function"), "name": names}),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}])
    | st.fixed_dictionaries(
        {
            "type": st.just("json_schema"),
            "json_schema": st.fixed_dictionaries(
                {"name": names}, optional={"schema": schema_like | junk, "strict": st.booleans()}
            ),
        }
    ),
    "chat_template_kwargs": st.dictionaries(
        st.sampled_from(["enable_thinking", "thinking", "reasoning_effort"]) | st.text(max_size=5),
        json_leaves,
        max_size=2,
    ),
    "text": replies
    | st.text(max_size=30)
    | st.fixed_dictionaries({}, optional={"format": text_format | junk, "verbosity": junk}),
    "stop": st.sampled_from(["STOP", "\n", "é", ["a", "b"]]),
}


#: Fields of which a body needs one (``/generate``: text or input_ids; tokenize: prompt, text
#: or messages).
ONE_OF = ("text", "input_ids", "prompt", "messages")


class Shapes:
    """Hypothesis strategies from JSON schema nodes: mostly values the schema allows (so that
    bodies get past the first check), sometimes values at or just past a bound, or junk."""

    def __init__(self, components: dict[str, Any]) -> None:
        self.components = components

    def of(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        return st.one_of(self.valid(node), self.valid(node), self.valid(node), self.edge(node))

    def valid(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            return st.deferred(lambda: self.of(self.components[name]))
        if "anyOf" in node:
            return st.one_of([self.valid(option) for option in node["anyOf"]])
        if "enum" in node:
            return st.sampled_from(node["enum"])
        kind = node.get("type")
        if kind == "object":
            return self._object(node)
        if kind == "array":
            most = min(node.get("maxItems", 3), 3)
            return st.lists(
                self.of(node.get("items", {})),
                min_size=node.get("minItems", 0),
                max_size=max(most, node.get("minItems", 0)),
            )
        if kind == "integer":
            low = node.get("minimum", -3)
            return st.integers(low, min(node.get("maximum", low + 8), low + 8))
        if kind == "number":
            low = node.get("minimum", node.get("exclusiveMinimum", -2.0))
            high = node.get("maximum", low + 2.0)
            return st.floats(low, high, exclude_min="exclusiveMinimum" in node)
        if kind == "string":
            return st.text(min_size=node.get("minLength", 0), max_size=12)
        if kind == "boolean":
            return st.booleans()
        if kind == "null":
            return st.none()
        return junk  # Any

    def edge(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        """Values at and just past the node's bounds, or of another type."""
        kind = node.get("type")
        if kind == "integer":
            low = node.get("minimum", -3)
            high = node.get("maximum", 2**31)
            # Never a large upper bound itself (a valid n=128 is just slow); one past it.
            values = [low - 1, high + 1, *BIG_INTS, *([high] if high <= 16 else [])]
            return st.sampled_from(values)
        if kind == "number":
            edges = [node[k] for k in ("minimum", "maximum", "exclusiveMinimum") if k in node]
            return st.sampled_from(
                [1e308, -1e308, *edges, *(e - 1e-9 for e in edges), *(e + 1e-9 for e in edges)]
            )
        if kind == "array":
            return st.lists(
                self.of(node.get("items", {})),
                min_size=node.get("maxItems", 3) + 1,
                max_size=node.get("maxItems", 3) + 2,
            ) | st.just([])
        return junk

    def _object(self, node: dict[str, Any]) -> st.SearchStrategy[Any]:
        properties = node.get("properties")
        if not properties:
            extra = node.get("additionalProperties")
            values = self.of(extra) if isinstance(extra, dict) else junk
            keys = st.text(max_size=6) | st.integers(0, 3000).map(str)
            return st.dictionaries(keys, values, max_size=3)
        required = [name for name in properties if name in node.get("required", [])]
        optional = sorted(set(properties) - set(required))

        def field(name: str) -> st.SearchStrategy[Any]:
            schema = self.of(properties[name])
            if name not in HINTS:
                return schema
            return st.one_of(HINTS[name], HINTS[name], HINTS[name], schema)

        @st.composite
        def build(draw: st.DrawFn) -> dict[str, Any]:
            chosen = (
                draw(st.lists(st.sampled_from(optional), max_size=4, unique=True))
                if optional
                else []
            )
            if "model" in properties and draw(st.booleans()):
                chosen.append("model")
            return {name: draw(field(name)) for name in [*required, *chosen]}

        return build()


def bodies(shapes: Shapes, component: str | None) -> st.SearchStrategy[bytes]:
    """Encoded bodies: shaped like the type, with one field made junk, or junk throughout."""
    encoded = junk.map(lambda v: json.dumps(v).encode()) | st.binary(max_size=40)
    if component is None:
        return encoded
    node = shapes.components[component]
    shaped = shapes.valid(node)
    names = sorted(node.get("properties", {}))

    def spoil(body: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
        return {**body, name: value}

    spoiled = st.builds(spoil, shaped, st.sampled_from(names), junk)
    dropped = st.builds(
        lambda body, name: {k: v for k, v in body.items() if k != name},
        shaped,
        st.sampled_from(names),
    )
    return (
        st.one_of(shaped, shaped, spoiled, dropped).map(lambda v: json.dumps(v).encode()) | encoded
    )


def check(response: httpx.Response, sent: bytes) -> None:
    note = f"{response.status_code} for {sent[:300]!r}: {response.text[:400]}"
    assert response.status_code < 500, note
    if response.status_code >= 400:
        error = response.json()["error"]
        assert isinstance(error["code"], str), note
        assert error["code"], note
        assert error["message"], note
    elif response.headers.get("content-type", "").startswith("text/event-stream"):
        assert "internal_server_error" not in response.text, note


def fuzz_route(router: Router, components: dict[str, Any], path: str, examples: int) -> int:
    shapes = Shapes(components)
    sent: list[int] = []

    @settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(body=bodies(shapes, ROUTES[path]))
    def run(body: bytes) -> None:
        response = client.post(path, content=body, headers={"content-type": "application/json"})
        sent.append(1)
        check(response, body)

    with httpx.Client(base_url=router.base_url, timeout=60) as client:
        run()
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "still there?"}]}
        after = client.post("/v1/chat/completions", json=chat)
        assert after.status_code == 200, after.text
    return len(sent)


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_no_route_answers_5xx_to_any_body(
    router: Router, components: dict[str, Any], path: str
) -> None:
    count = fuzz_route(router, components, path, examples=30)
    print(f"{path}: {count} bodies")


#: Bodies the fuzzing found answered with a 500 (a list where a name was looked up).
FOUND = [
    ("/v1/responses", {"model": MODEL, "input": [{"role": [], "content": ""}]}),
    (
        "/v1/tokenize",
        {"model": MODEL, "messages": [{"role": "system", "content": [{"type": [], "text": "x"}]}]},
    ),
]


@pytest.mark.parametrize(("path", "body"), FOUND)
def test_bodies_the_fuzzing_found_get_a_400(router: Router, path: str, body: Any) -> None:
    sent = json.dumps(body).encode()
    with httpx.Client(base_url=router.base_url, timeout=30) as client:
        answer = client.post(path, content=sent, headers={"content-type": "application/json"})
    check(answer, sent)
    assert answer.status_code == 400


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("path", sorted(ROUTES))
def test_no_route_answers_5xx_to_many_bodies(
    router: Router, components: dict[str, Any], path: str
) -> None:
    count = fuzz_route(router, components, path, examples=1000)
    print(f"{path}: {count} bodies")


@settings(max_examples=40, deadline=None, database=None)
@given(
    response_id=st.text(min_size=1, max_size=20),
    method=st.sampled_from(["GET", "DELETE"]),
    tail=st.sampled_from(["", "/input_items", "/input_items?limit=0", "/input_items?order=x"]),
    query=st.sampled_from(["", "?stream=true", "?limit=1000&after=x"]),
)
def test_no_response_id_answers_5xx(
    router: Router, response_id: str, method: str, tail: str, query: str
) -> None:
    """``GET``/``DELETE /v1/responses/{id}`` and the input items of any id: a JSON 4xx."""
    quoted = urllib.parse.quote(response_id, safe="")
    url = f"{router.base_url}/v1/responses/{quoted}{tail}{query if not tail else ''}"
    response = httpx.request(method, url, timeout=30)
    check(response, url.encode())
    assert 400 <= response.status_code < 500


@settings(max_examples=40, deadline=None, database=None)
@given(
    conversation_id=st.text(min_size=1, max_size=20),
    method=st.sampled_from(["GET", "POST", "DELETE"]),
    tail=st.sampled_from(["", "/items", "/items/msg_1", "/items?limit=0&include[]=x"]),
    body=junk | st.fixed_dictionaries({"items": junk}) | st.fixed_dictionaries({"metadata": junk}),
    kept=st.booleans(),
)
def test_no_conversation_id_answers_5xx(
    router: Router, *, conversation_id: str, method: str, tail: str, body: Any, kept: bool
) -> None:
    """Any method on a conversation (of any id, or one that is kept), its items and one item,
    with any JSON: a 4xx, or a 200 for what is valid."""
    if kept:
        created = httpx.post(f"{router.base_url}/v1/conversations", json={}, timeout=30)
        conversation_id = created.json()["id"]
    quoted = urllib.parse.quote(conversation_id, safe="")
    url = f"{router.base_url}/v1/conversations/{quoted}{tail}"
    response = httpx.request(method, url, json=body if method == "POST" else None, timeout=30)
    check(response, url.encode())
    assert response.status_code < 500
