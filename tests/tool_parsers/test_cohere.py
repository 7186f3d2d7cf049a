"""Cohere Command ``<|START_ACTION|>`` tool calls."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "cohere"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """Cohere's action block."""
    objs = [
        f'{{"tool_call_id": "{i}", "tool_name": {json.dumps(n)}, "parameters": {dumps(a)}}}'
        for i, (n, a) in enumerate(calls)
    ]
    return "<|START_ACTION|>[" + ", ".join(objs) + "]<|END_ACTION|>"


def test_calls_and_response_wrappers() -> None:
    calls: list[Call] = [("search", {"q": "<|END_ACTION|>"}), ("get_weather", {})]
    check_rendered(
        P,
        render,
        calls,
        before="<|START_RESPONSE|>Hi<|END_RESPONSE|>",
        tools=TOOLS,
        expected_text="Hi",
    )


def test_single_object_and_missing_parameters() -> None:
    text = '<|START_ACTION|>{"tool_name": "search"}<|END_ACTION|>'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls[0].name, result.calls[0].arguments) == ("search", "{}")
