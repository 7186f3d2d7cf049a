"""Bad input to the Messages API over real sockets: every case is a 4xx in Anthropic's error
shape, never a 5xx, on both routes — and the router serves a normal request afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.server.harness import MODEL, Router, run_router

HI = [{"role": "user", "content": "hi"}]
DEEP = b'{"a":' * 5000 + b"1" + b"}" * 5000
BAD_BODIES: list[bytes | dict[str, Any]] = [
    b"",
    b"not json",
    b"[]",
    b'{"model": "m", "max_tokens": 4, "messages": [' + DEEP + b"]}",
    {"max_tokens": 4, "messages": "hi"},
    {"max_tokens": 4, "messages": [5]},
    {"max_tokens": 4, "messages": [{"role": "user"}]},
    {"max_tokens": 4, "messages": [{"role": "user", "content": 5}]},
    {"max_tokens": 4, "messages": [{"role": "user", "content": [5]}]},
    {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
    {
        "max_tokens": 4,
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64"}}]}
        ],
    },
    {
        "max_tokens": 4,
        "messages": [{"role": "user", "content": [{"type": "tool_result", "content": 3}]}],
    },
    {
        "max_tokens": 4,
        "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "x", "name": "f"}]}
        ],
    },
    {"max_tokens": 4, "messages": [{"role": "tool", "content": "x"}]},
    {"max_tokens": 4, "messages": HI, "system": [{"type": "image"}]},
    {"max_tokens": 4, "messages": HI, "system": 5},
    {"max_tokens": 4, "messages": HI, "tools": [{"name": "f"}]},
    {"max_tokens": 4, "messages": HI, "tools": [5]},
    {"max_tokens": 4, "messages": HI, "tool_choice": {"type": "tool", "name": "nope"}},
    {"max_tokens": 4, "messages": HI, "tool_choice": {"type": "any"}},
    {"max_tokens": 4, "messages": HI, "thinking": {"type": "enabled"}},
    {"max_tokens": 4, "messages": HI, "thinking": {"type": "sometimes"}},
    {"max_tokens": 4, "messages": HI, "output_config": {"format": {"type": "xml"}}},
    {"max_tokens": 4, "messages": HI, "context_management": {"edits": 5}},
    {"max_tokens": 4, "messages": HI, "context_management": {"edits": [{"type": "x"}]}},
    {"max_tokens": 4, "messages": HI, "mcp_servers": [{"url": "https://x"}]},
    {"max_tokens": 4, "messages": HI, "container": "c"},
    {"max_tokens": 4, "messages": HI, "stop_sequences": [""]},
    {"max_tokens": 0, "messages": HI},
    {"max_tokens": 4, "messages": HI, "temperature": 1.5},
    {"max_tokens": 4, "messages": HI, "model": "no-such-model"},
    {
        "max_tokens": 4,
        "messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}],
    },
    {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    {"max_tokens": 4, "messages": [{"role": "user", "content": "x", "name": "n"}]},
    {"max_tokens": 4, "messages": HI, "system": [5]},
    {"max_tokens": 4, "messages": HI, "metadata": 5},
    {"max_tokens": 4, "messages": HI, "output_config": {"effort": 5}},
    {"max_tokens": 4, "messages": HI, "thinking": {"type": "enabled", "budget_tokens": True}},
    {
        "max_tokens": 4,
        "messages": HI,
        "tools": [{"name": "f", "input_schema": {}}],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": "yes"},
    },
    {"max_tokens": 4, "messages": HI, "tools": [{"name": "f", "input_schema": {}, "zzz": 1}]},
    {
        "max_tokens": 4,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_use"}]}
                ],
            }
        ],
    },
    {
        "max_tokens": 4,
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": ""}}]}
        ],
    },
    {
        "max_tokens": 4,
        "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}],
    },
    {"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "thinking"}]}]},
    {"max_tokens": 4, "messages": [{"role": "assistant", "content": [{"type": "image"}]}]},
]


#: The fields count_tokens takes (and ``max_tokens``, which :func:`post` drops for it).
COUNTED = {
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "context_management",
    "mcp_servers",
    "model",
}


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with run_router(sims=1) as running:
        yield running


def post(router: Router, path: str, body: bytes | dict[str, Any]) -> httpx.Response:
    if isinstance(body, dict):
        body = {"model": MODEL, **body}
        if path.endswith("count_tokens"):
            body.pop("max_tokens", None)
        return httpx.post(f"{router.base_url}{path}", json=body, timeout=30)
    return httpx.post(
        f"{router.base_url}{path}",
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_bad_input_is_a_4xx_in_anthropics_shape(router: Router, path: str) -> None:
    for body in BAD_BODIES:
        counting = path.endswith("count_tokens")
        if counting and isinstance(body, dict) and (set(body) - COUNTED or not body["max_tokens"]):
            continue  # a field count_tokens does not take (refused too, as unknown)
        response = post(router, path, body)
        assert 400 <= response.status_code < 500, (body, response.status_code, response.text)
        answer = response.json()
        assert answer["type"] == "error", (body, answer)
        assert set(answer["error"]) == {"type", "message"}, answer
        assert answer["error"]["message"]
    ok = post(router, path, {"max_tokens": 4, "messages": HI})
    assert ok.status_code == 200, ok.text


def test_a_wrong_method_and_a_missing_key_answer_in_anthropics_shape(router: Router) -> None:
    wrong = httpx.get(f"{router.base_url}/v1/messages", timeout=10)
    assert wrong.status_code == 405
    assert wrong.json()["error"]["type"] == "invalid_request_error"
