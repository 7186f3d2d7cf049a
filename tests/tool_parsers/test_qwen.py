"""Qwen / Hermes ``<tool_call>`` JSON blocks."""

from __future__ import annotations

import json

from turnout.tool_calls.types import ToolCall, ToolCallDelta

from .harness import (
    Call,
    assert_calls,
    assert_cut_off_consistent,
    assert_stream_matches_complete,
    check_rendered,
    dumps,
    stream,
    tools_for,
)

P = "qwen"
TOOLS = tools_for(["get_weather", "search"])


def render(calls: list[Call]) -> str:
    """One block per call (Qwen writes a newline between blocks; that would be normal text)."""
    return "".join(
        f'<tool_call>\n{{"name": {json.dumps(n)}, "arguments": {dumps(a)}}}\n</tool_call>'
        for n, a in calls
    )


def test_single_parallel_and_text_around() -> None:
    calls: list[Call] = [("get_weather", {"city": "Paris"}), ("search", {"q": "x", "n": [1, 2]})]
    check_rendered(P, render, calls, before="Let me check.\n", after="\nDone.", tools=TOOLS)


def test_unicode_escapes_nested_and_numbers_kept_verbatim() -> None:
    args = '{"q": "caf\\u00e9 \\"x\\" \\\\ 東京 🙂", "n": 1.50, "d": {"a": [1e3, {"b": null}]}}'
    text = f'<tool_call>{{"name": "search", "arguments": {args}}}</tool_call>'
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (4,), (1000,)])
    assert result.calls[0].arguments == args
    assert result.normal_text == ""


def test_empty_and_missing_arguments() -> None:
    text = (
        '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "search"}</tool_call>'
    )
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert [c.arguments for c in result.calls] == ["{}", "{}"]


def test_arguments_as_json_string_are_unwrapped_once() -> None:
    text = '<tool_call>{"name": "search", "arguments": "{\\"q\\": 1}"}</tool_call>'
    assert_calls(assert_stream_matches_complete(P, text, TOOLS), [("search", {"q": 1})])


def test_unknown_function_stays_text_verbatim() -> None:
    text = 'a <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> b' + render(
        [("search", {})]
    )
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert result.normal_text == 'a <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> b'
    assert [c.name for c in result.calls] == ["search"]
    # Without tools the same call is returned.
    assert len(assert_stream_matches_complete(P, text, None).calls) == 2


def test_malformed_json_before_name_stays_text() -> None:
    for text in ["<tool_call>not json</tool_call>", "<tool_call>{'name': 'x'}</tool_call>", "{"]:
        result = assert_stream_matches_complete(P, text, TOOLS)
        assert result.calls == []
        assert result.normal_text == text


def test_malformed_call_is_not_a_call() -> None:
    # The example: the arguments never close before the end marker and the output ends.
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\n</tool_call>'
    result = assert_stream_matches_complete(P, text, tools_for(["get_weather"]))
    assert (result.calls, result.normal_text) == ([], text)
    # Invalid JSON after the name: the call's text, tags included, is text; later calls stand.
    bad = '<tool_call>{"name": "search", "arguments": {"q": 1 x}}</tool_call>'
    good = '<tool_call>{"name": "search", "arguments": {"q": 2}}</tool_call>'
    result = assert_stream_matches_complete(P, f"a {bad} b {good}", TOOLS)
    assert result.normal_text == f"a {bad} b "
    assert [c.arguments for c in result.calls] == ['{"q": 2}']


def test_call_cut_off_by_max_tokens_keeps_its_arguments_as_received() -> None:
    text = 'Sure. <tool_call>{"name": "search", "arguments": {"q": "abc'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([], text)
    cut = assert_cut_off_consistent(P, text, TOOLS)
    assert cut.calls == [ToolCall("search", '{"q": "abc')]
    assert cut.normal_text == "Sure. "
    # Cut right after the name: the call, without arguments; before the name is complete: text.
    named = assert_cut_off_consistent(P, '<tool_call>{"name": "search", "argu', TOOLS)
    assert named.calls == [ToolCall("search", "")]
    unnamed = assert_cut_off_consistent(P, '<tool_call>{"name": "sea', TOOLS)
    assert (unnamed.calls, unnamed.normal_text) == ([], '<tool_call>{"name": "sea')


def test_markers_split_across_deltas_never_leak() -> None:
    text = "Hi <tool_call>" + '{"name": "search", "arguments": {"q": 1}}</tool_call> bye'
    folded, steps = stream(P, list(text), TOOLS)
    assert folded.normal_text == "Hi  bye"
    assert all("<" not in s.normal_text for s in steps)
    # "<" alone is released as soon as it cannot start the marker.
    folded, steps = stream(P, ["a <b", "c"], TOOLS)
    assert steps[0].normal_text == "a <b"


def test_a_call_is_released_once_complete() -> None:
    text = '<tool_call>{"name": "search", "arguments": {"q": "hello world"}}</tool_call> after'
    cut = text.index("world")
    _, steps = stream(P, [text[:cut], text[cut : cut + 20], text[cut + 20 :]], TOOLS)
    assert steps[0].calls == []  # the name alone is not released: the call may still break
    assert steps[1].calls == [ToolCallDelta(0, "search", '{"q": "hello world"}')]
    assert steps[2].normal_text == " after"
