"""Jamba ``<tool_calls>`` arrays."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "jamba"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """Jamba's block."""
    objs = [f'{{"name": {json.dumps(n)}, "arguments": {dumps(a)}}}' for n, a in calls]
    return "<tool_calls>[" + ", ".join(objs) + "]</tool_calls>"


def test_calls_and_text() -> None:
    calls: list[Call] = [("search", {"q": 1}), ("get_weather", {})]
    check_rendered(P, render, calls, before="a ", after=" b", tools=TOOLS)


def test_unknown_element_keeps_its_object() -> None:
    text = render([("search", {}), ("bad", {"x": 1})])
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert result.normal_text == '{"name": "bad", "arguments": {"x": 1}}'
