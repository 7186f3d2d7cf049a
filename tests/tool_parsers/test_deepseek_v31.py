"""DeepSeek V3.1 tool calls."""

from __future__ import annotations

from turnout.tool_calls.types import ToolCall

from .harness import (
    Call,
    assert_cut_off_consistent,
    assert_stream_matches_complete,
    check_rendered,
    dumps,
    tools_for,
)

P = "deepseek_v31"
TOOLS = tools_for(["get_weather", "search"])
B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def render(calls: list[Call]) -> str:
    """DeepSeek V3.1's own rendering."""
    return B + "".join(f"{CB}{n}{SEP}{dumps(a)}{CE}" for n, a in calls) + E


def test_single_parallel_and_text() -> None:
    calls: list[Call] = [("search", {"q": "x"}), ("get_weather", {"city": "Oslo"})]
    check_rendered(P, render, calls, before="Hmm. ", after=" ok", tools=TOOLS)


def test_unknown_function_keeps_its_call_text() -> None:
    text = render([("other", {"a": 1}), ("search", {})])
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert result.normal_text == f'{CB}other{SEP}{{"a": 1}}{CE}'
    assert [c.name for c in result.calls] == ["search"]


def test_unfinished_call_is_text_unless_cut_off_by_max_tokens() -> None:
    text = f'Hm {B}{CB}search{SEP}{{"q": [1, 2'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([], text)
    cut = assert_cut_off_consistent(P, text, TOOLS)
    assert (cut.calls, cut.normal_text) == ([ToolCall("search", '{"q": [1, 2')], "Hm ")
