"""InternLM ``<|action_start|><|plugin|>`` calls."""

from __future__ import annotations

import json

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "internlm"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """One action block per call."""
    return "".join(
        f'<|action_start|><|plugin|>{{"name": {json.dumps(n)}, "parameters": {dumps(a)}}}'
        "<|action_end|>"
        for n, a in calls
    )


def test_calls_and_text() -> None:
    calls: list[Call] = [("search", {"q": 1}), ("get_weather", {})]
    check_rendered(P, render, calls, before="a ", after=" b", tools=TOOLS)


def test_interpreter_block_stays_text() -> None:
    text = "<|action_start|><|interpreter|>print(1)<|action_end|>"
    assert assert_stream_matches_complete(P, text, TOOLS).normal_text == text
