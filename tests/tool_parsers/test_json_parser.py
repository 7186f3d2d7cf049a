"""Bare JSON tool calls (the ``json`` format)."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "json"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """One object for one call, an array for several."""
    objs = [f'{{"name": {json.dumps(n)}, "arguments": {dumps(a)}}}' for n, a in calls]
    return objs[0] if len(objs) == 1 else "[" + ", ".join(objs) + "]"


def test_object_array_and_prose() -> None:
    check_rendered(P, render, [("search", {"q": "x"})], before="Sure: ", after=" ok", tools=TOOLS)
    calls: list[Call] = [("search", {"q": [1, {"a": "}"}]}), ("get_weather", {})]
    check_rendered(P, render, calls, before="x\n", after="\n", tools=TOOLS)


def test_json_that_is_not_a_call_stays_text() -> None:
    for text in ['{"answer": 42}', "[1, 2, 3]", "{not json", '{"name": "Bob", "age": 3}', "{}"]:
        result = assert_stream_matches_complete(P, text, None)
        assert result.calls == []
        assert result.normal_text == text


def test_parameters_key_and_reversed_order() -> None:
    text = '{"parameters": {"q": 1}, "name": "search"}'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls[0].name, result.calls[0].arguments) == ("search", '{"q": 1}')


def test_unknown_function_kept_as_text() -> None:
    text = 'x {"name": "other", "arguments": {"a": 1}} y'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert result.calls == []
    assert result.normal_text == text
