"""Step-3: ``<｜tool_calls_begin｜>…<steptml:invoke name=…><steptml:parameter name=…>…``."""

from __future__ import annotations

from typing import Any

from turnout.tool_calls.types import ToolCall

from .harness import (
    Call,
    assert_calls,
    assert_cut_off_consistent,
    assert_stream_matches_complete,
    check_rendered,
    raw_value,
    typed_tool,
)

P = "step3"
TOOLS: list[dict[str, Any]] = [typed_tool("get_weather", city="string", days="integer")]


def render(calls: list[Call]) -> str:
    """Step-3 output for ``calls`` (all calls in one block)."""
    parts = ["<｜tool_calls_begin｜>\n"]
    for name, args in calls:
        params = "".join(
            f'<steptml:parameter name="{k}">{raw_value(v)}</steptml:parameter>\n'
            for k, v in args.items()
        )
        parts.append(
            f'<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="{name}">\n'
            f"{params}</steptml:invoke><｜tool_call_end｜>\n"
        )
    parts.append("<｜tool_calls_end｜>")
    return "".join(parts)


def test_single_call() -> None:
    text = (
        "<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜>"
        '<steptml:invoke name="get_weather">\n'
        '<steptml:parameter name="city">Shanghai</steptml:parameter>\n'
        '<steptml:parameter name="days">3</steptml:parameter>\n'
        "</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (3,), (1_000,)])
    assert result.calls[0].arguments == '{"city": "Shanghai", "days": 3}'
    assert result.normal_text == ""


def test_parallel_with_text_around_and_angle_brackets_in_values() -> None:
    calls: list[Call] = [("get_weather", {"city": "a < b > c"}), ("get_weather", {"days": 2})]
    check_rendered(P, render, calls, before="Checking.\n", after="\nDone.", tools=TOOLS)


def test_unicode_nested_inference() -> None:
    check_rendered(P, render, [("f", {"o": {"x": ["é", 2]}, "s": '中文 "q" \\'})])


def test_empty_name_is_not_a_call() -> None:
    text = (
        "<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜>"
        '<steptml:invoke name="">\n</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>'
    )
    result = assert_stream_matches_complete(P, text, None, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)


def test_unknown_function_inside_block_with_known() -> None:
    text = render([("get_weather", {"city": "x"}), ("other", {})])
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert_calls(result, [("get_weather", {"city": "x"})])
    assert result.normal_text == '<steptml:invoke name="other">\n</steptml:invoke>'


def test_cut_off() -> None:
    text = render([("get_weather", {"city": "Paris"})])[:-40]  # inside </steptml:invoke>
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)
    cut = assert_cut_off_consistent(P, text, TOOLS)
    assert (cut.calls, cut.normal_text) == ([ToolCall("get_weather", '{"city": "Paris"')], "")
