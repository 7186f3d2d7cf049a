"""Granite ``<|tool_call|>`` arrays."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "granite"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """Granite 3.0's rendering."""
    objs = [f'{{"name": {json.dumps(n)}, "arguments": {dumps(a)}}}' for n, a in calls]
    return "<|tool_call|>[" + ", ".join(objs) + "]"


def test_calls_and_text() -> None:
    calls: list[Call] = [("search", {"q": 1}), ("get_weather", {"c": "x"})]
    check_rendered(P, render, calls, before="a ", after=" b", tools=TOOLS)


def test_granite_31_tag() -> None:
    text = '<tool_call>[{"name": "search", "arguments": {}}]</tool_call>x'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (len(result.calls), result.normal_text) == (1, "x")
