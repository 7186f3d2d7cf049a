"""xLAM JSON arrays, bare or wrapped."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "xlam"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """The bare array xLAM writes."""
    return (
        "["
        + ", ".join(f'{{"name": {json.dumps(n)}, "arguments": {dumps(a)}}}' for n, a in calls)
        + "]"
    )


def test_bare_fenced_and_tagged() -> None:
    calls: list[Call] = [("search", {"q": 1}), ("get_weather", {})]
    check_rendered(P, render, calls, before="a ", after=" b", tools=TOOLS)
    for before, after in [
        ("```json\n", "\n```"),
        ("[TOOL_CALLS]", ""),
        ("<tool_call>", "</tool_call>"),
    ]:
        result = check_rendered(
            P, render, calls, before=before, after=after, tools=TOOLS, expected_text=""
        )
        assert len(result.calls) == 2


def test_plain_json_stays_text() -> None:
    text = 'Result: [{"id": 1}] and ```json\n{"a": 1}\n```'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([], text)
