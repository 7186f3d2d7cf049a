"""gpt-oss harmony: ``<|channel|>commentary to=functions.NAME …<|message|>{json}<|call|>``."""

from __future__ import annotations

import json

import pytest

import turnout
from turnout.tool_calls.types import ToolCall, ToolCallDelta

from .harness import (
    Call,
    assert_calls,
    assert_cut_off_consistent,
    assert_stream_matches_complete,
    check_rendered,
    split,
    stream,
    timed_stream,
    tools_for,
)

P = "gpt_oss"
TOOLS = tools_for(["get_weather", "search"])
ANALYSIS = "<|channel|>analysis<|message|>Need weather. {not json} <b><|end|>"


def render(calls: list[Call]) -> str:
    """gpt-oss output for ``calls``: one commentary message per call (``<|constrain|>json``)."""
    return "".join(
        "<|start|>assistant<|channel|>commentary to=functions."
        f"{name} <|constrain|>json<|message|>{json.dumps(args, ensure_ascii=False)}<|call|>"
        for name, args in calls
    )


def final(text: str) -> str:
    return f"<|start|>assistant<|channel|>final<|message|>{text}<|return|>"


def test_single_call_after_analysis() -> None:
    text = ANALYSIS + render([("get_weather", {"city": "Paris", "unit": "c"})])
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (4,), (1_000,)])
    assert result.calls[0].name == "get_weather"
    assert result.calls[0].arguments == '{"city": "Paris", "unit": "c"}'
    assert result.normal_text == ""


def test_final_channel_is_content_and_tokens_never_leak() -> None:
    text = ANALYSIS + final("It is **sunny** <3 {x}")
    for sizes in [(1,), (2,), (3,), (1_000,)]:
        result = assert_stream_matches_complete(P, text, TOOLS, sizes)
        assert result.normal_text == "It is **sunny** <3 {x}"
    _, steps = stream(P, split(text, (1,)), TOOLS)
    assert all("<|" not in s.normal_text and "|>" not in s.normal_text for s in steps)


def test_after_reasoning_parser_removed_analysis() -> None:
    reasoning = turnout.load_plugins().reasoning_parsers.create("gpt_oss")
    raw = ANALYSIS + "<|start|>assistant<|channel|>commentary to=functions.search<|message|>"
    raw += '{"q": "x"}<|call|>'
    passed = reasoning.parse_complete(raw)
    assert passed.reasoning_text == "Need weather. {not json} <b>"
    text = passed.normal_text
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert_calls(result, [("search", {"q": "x"})])
    assert result.normal_text == ""


def test_constrain_optional_and_recipient_in_role() -> None:
    text = (
        '<|channel|>commentary to=functions.search<|message|>{"q": 1}<|call|>'
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{}<|call|>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert_calls(result, [("search", {"q": 1}), ("get_weather", {})])


def test_several_calls_with_preamble_and_final() -> None:
    calls: list[Call] = [
        ("get_weather", {"city": '中文 "q" \\ 🙂'}),
        ("search", {"q": [1, {"a": None}]}),
    ]
    before = "<|channel|>commentary<|message|>Let me check.<|end|>"
    after = final("Done.")
    result = check_rendered(
        P,
        render,
        calls,
        before=before,
        after=after,
        tools=TOOLS,
        expected_text="Let me check.Done.",
    )
    assert result.calls[1].arguments == '{"q": [1, {"a": null}]}'


def test_unknown_function_body_is_text() -> None:
    text = render([("delete", {"all": True})]) + final("ok")
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert result.calls == []
    assert result.normal_text == '{"all": true}ok'


def test_no_tools_any_recipient_is_a_call() -> None:
    text = "<|channel|>analysis to=python code<|message|>{}<|call|>"
    result = assert_stream_matches_complete(P, text, None)
    assert_calls(result, [("python", {})])


def test_empty_and_malformed_bodies() -> None:
    empty = "<|channel|>commentary to=functions.search <|constrain|>json<|message|>  <|call|>"
    assert_calls(assert_stream_matches_complete(P, empty, TOOLS), [("search", {})])
    # A body that is not JSON, or breaks, is not a call: the body is content.
    bad = "<|channel|>commentary to=functions.search<|message|>query: cats<|call|>"
    result = assert_stream_matches_complete(P, bad, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], "query: cats")
    broken = '<|channel|>commentary to=functions.search<|message|>{"q": "a", oops}<|call|>'
    result = assert_stream_matches_complete(P, broken, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], '{"q": "a", oops}')


def test_unfinished_call_and_cut_off_header() -> None:
    text = '<|channel|>commentary to=functions.search<|message|>{"q": "long que'
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], '{"q": "long que')
    # The same body ended by <|call|> (the model's stop token) is no call either.
    result = assert_stream_matches_complete(P, text + "<|call|>", TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], '{"q": "long que')
    cut = assert_cut_off_consistent(P, text, TOOLS)
    assert (cut.calls, cut.normal_text) == ([ToolCall("search", '{"q": "long que')], "")
    header = final("Hi") + "<|start|>assistant<|channel|>commentary to=functions.sea"
    result = assert_stream_matches_complete(P, header, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], "Hi")


def test_plain_text_without_harmony_is_content() -> None:
    text = 'Just text, {"name": "x"} and <|notatoken|> too.'
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)


def test_overlong_header_is_text() -> None:
    text = "<|channel|>" + "x" * 600 + "<|message|>body"
    result = assert_stream_matches_complete(P, text, None, [(1,), (7,), (1_000,)])
    assert result.normal_text == "x" * 600 + "body"


def test_call_released_whole_when_its_json_completes() -> None:
    text = render([("search", {"q": "y" * 200})])
    _, steps = stream(P, split(text, (4,)), TOOLS)
    released = [(i, d) for i, s in enumerate(steps) for d in s.calls]
    assert [d for _, d in released] == [ToolCallDelta(0, "search", json.dumps({"q": "y" * 200}))]
    end = text.index("<|call|>")  # the JSON ends here: released in the chunk holding its "}"
    assert released[0][0] == (end - 1) // 4


@pytest.mark.slow  # a timing check: run by `tox -e slow`, never in the default suite
def test_long_arguments_cost_is_linear() -> None:
    def run(n: int) -> float:
        text = render([("search", {"q": "abc " * n})])
        chunks = split(text, (4,))
        folded, elapsed = timed_stream(P, chunks, TOOLS)
        assert len(folded.calls) == 1
        return elapsed

    run(500)
    small, large = run(2_000), run(16_000)
    assert large < small * 8 * 3
