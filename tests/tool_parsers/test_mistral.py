"""Mistral ``[TOOL_CALLS]`` arrays and compact ``NAME[ARGS]{json}`` calls."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "mistral"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """The array form."""
    objs = [f'{{"name": {json.dumps(n)}, "arguments": {dumps(a)}}}' for n, a in calls]
    return "[TOOL_CALLS] [" + ", ".join(objs) + "]"


def render_compact(calls: list[Call]) -> str:
    """The v11+ form, one ``[TOOL_CALLS]`` per call."""
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{dumps(a, compact=True)}" for n, a in calls)


def test_array_form_with_brackets_in_arguments() -> None:
    calls: list[Call] = [("get_weather", {"city": "[City Name]"}), ("search", {"q": "a]}"})]
    check_rendered(P, render, calls, before="Sure. ", after=" ]", tools=TOOLS)


def test_compact_form_and_call_id() -> None:
    calls: list[Call] = [("get_weather", {"city": "Paris"}), ("search", {})]
    check_rendered(P, render_compact, calls, before="x", tools=TOOLS)
    text = '[TOOL_CALLS]search[CALL_ID]a1B2c3D4e[ARGS]{"q": 1}'
    assert assert_stream_matches_complete(P, text, TOOLS).calls[0].arguments == '{"q": 1}'


def test_unknown_and_malformed() -> None:
    text = '[TOOL_CALLS]nope[ARGS]{"a": 1}'
    assert assert_stream_matches_complete(P, text, TOOLS).normal_text == text
    text = "[TOOL_CALLS] nonsense here"
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([], text)
