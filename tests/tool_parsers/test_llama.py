"""Llama 3.x JSON tool calls."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "llama"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """``<|python_tag|>`` then ``;``-separated objects with ``parameters``."""
    return "<|python_tag|>" + "; ".join(
        f'{{"name": {json.dumps(n)}, "parameters": {dumps(a)}}}' for n, a in calls
    )


def test_single_parallel_and_text() -> None:
    check_rendered(P, render, [("search", {"q": "x"})], before="ok ", after=" done", tools=TOOLS)
    calls: list[Call] = [("search", {"q": "x"}), ("get_weather", {"city": "Oslo"})]
    check_rendered(P, render, calls, tools=TOOLS)


def test_without_tag_and_builtin_tool_call_stays_text() -> None:
    text = '{"name": "search", "parameters": {"q": 1}}'
    assert assert_stream_matches_complete(P, text, TOOLS).calls[0].name == "search"
    text = '<|python_tag|>brave_search.call(query="x")'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([], text)


def test_trailing_separator_is_text() -> None:
    result = assert_stream_matches_complete(P, '{"name": "search", "parameters": {}}; bye', TOOLS)
    assert result.normal_text == "; bye"
