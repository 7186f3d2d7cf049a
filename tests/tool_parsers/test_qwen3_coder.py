"""Qwen3-Coder: ``<tool_call><function=NAME><parameter=KEY>value</parameter>…``."""

from __future__ import annotations

import json

import pytest

from turnout.tool_calls.types import ToolCall, ToolCallDelta

from .harness import (
    Call,
    assert_calls,
    assert_cut_off_consistent,
    assert_stream_matches_complete,
    check_rendered,
    raw_value,
    split,
    stream,
    timed_stream,
    typed_tool,
)

P = "qwen3_coder"


def render(calls: list[Call]) -> str:
    """Qwen3-Coder output for ``calls`` (one ``<tool_call>`` block per call, ``\\n`` between)."""
    blocks = []
    for name, args in calls:
        params = "".join(
            f"<parameter={k}>\n{raw_value(v)}\n</parameter>\n" for k, v in args.items()
        )
        blocks.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
    return "\n".join(blocks)


TOOLS = [
    typed_tool("get_weather", city="string", days="integer", units="string", opts="object"),
    typed_tool("write_file", path="string", content="string"),
]


def test_single_call_typed_by_schema() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (4,), (1_000,)])
    assert result.calls[0].name == "get_weather"
    assert result.calls[0].arguments == '{"city": "Paris", "days": 3}'
    assert result.normal_text == ""


def test_string_param_stays_string_even_if_numeric() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\n3\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert result.calls[0].arguments == '{"city": "3"}'


def test_parallel_calls_with_text_around() -> None:
    calls: list[Call] = [
        ("get_weather", {"city": "Paris", "days": 2}),
        ("write_file", {"path": "a.txt"}),
    ]
    check_rendered(P, render, calls, before="Let me check.\n\n", after="\nDone!", tools=TOOLS)


def test_text_between_blocks_is_kept() -> None:
    one = render([("get_weather", {"city": "A"})])
    two = render([("get_weather", {"city": "B"})])
    result = assert_stream_matches_complete(P, f"x{one} and then {two}y", TOOLS, [(1,), (5,)])
    assert result.normal_text == "x and then y"
    assert_calls(result, [("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})])


def test_values_are_trimmed_at_both_ends() -> None:
    # As SGLang and smg: whitespace around a value is format; a blank value is "".
    content = "def f():\n    return '&amp; <b>'"
    text = (
        "<tool_call>\n<function=write_file>\n<parameter=path>  f.py \t</parameter>\n"
        f"<parameter=content>\n\n{content}\n\n</parameter>\n"
        "<parameter=mode>\n \n</parameter>\n</function>\n</tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (3, 1, 4), (1_000,)])
    assert json.loads(result.calls[0].arguments) == {"path": "f.py", "content": content, "mode": ""}


def test_unicode_and_escapes() -> None:
    city = 'Zürich "中文" \\n 🙂\ttab'
    check_rendered(P, render, [("get_weather", {"city": city})], tools=TOOLS)


def test_nested_json_and_inference_without_schema() -> None:
    opts = {"a": [1, 2.5, {"b": None}], "c": "x"}
    text = render([("anything", {"opts": opts, "n": 7, "flag": True, "s": "plain"})])
    result = assert_stream_matches_complete(P, text, None)
    assert result.calls[0].arguments == (
        '{"opts": {"a": [1, 2.5, {"b": null}], "c": "x"}, "n": 7, "flag": true, "s": "plain"}'
    )


def test_malformed_object_value_becomes_string() -> None:
    text = render([("get_weather", {"opts": "{not json"})])
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert json.loads(result.calls[0].arguments) == {"opts": "{not json"}


def test_unknown_function_stays_text() -> None:
    text = "Hi " + render([("delete_all", {"x": "1"})]) + " bye"
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert result.calls == []
    assert result.normal_text == text


def test_unknown_among_known() -> None:
    text = render([("get_weather", {"city": "A"}), ("nope", {}), ("get_weather", {"city": "B"})])
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert_calls(result, [("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})])
    # the line break after a block of calls is a separator when another block follows
    assert result.normal_text == render([("nope", {})]) + "\n"


def test_empty_arguments() -> None:
    result = assert_stream_matches_complete(
        P, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>", TOOLS
    )
    assert result.calls[0].arguments == "{}"


def test_markers_split_never_leak() -> None:
    text = "Look: " + render([("get_weather", {"city": "Paris"})]) + " ok"
    for sizes in [(1,), (2,), (3,), (5, 7)]:
        _, steps = stream(P, split(text, sizes), TOOLS)
        assert "".join(s.normal_text for s in steps) == "Look:  ok"
        assert all("<" not in s.normal_text for s in steps)


def test_call_released_whole_at_its_function_end() -> None:
    text = render([("write_file", {"path": "a", "content": "x" * 50})])
    _, steps = stream(P, split(text, (1,)), TOOLS)
    released = [(i, d) for i, s in enumerate(steps) for d in s.calls]
    args = json.dumps({"path": "a", "content": "x" * 50})
    assert [d for _, d in released] == [ToolCallDelta(0, "write_file", args)]
    assert released[0][0] == text.index("</function>") + len("</function>") - 1


def test_tool_call_tag_in_prose_is_text() -> None:
    text = "Use the <tool_call> tag like this: <tool_call> hello </tool_call>."
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert result.calls == []
    assert result.normal_text == text


def test_missing_closing_tags_tolerated() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "<parameter=days>\n3\n</tool_call>after"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert_calls(result, [("get_weather", {"city": "Paris", "days": 3})])
    assert result.normal_text == "after"


def test_unfinished_call_is_text_unless_cut_off_by_max_tokens() -> None:
    text = "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"
    for unfinished in [text, text + "is\n</parameter>\n", text + "is\n</para"]:
        result = assert_stream_matches_complete(P, unfinished, TOOLS, [(1,), (2,), (1_000,)])
        assert (result.calls, result.normal_text) == ([], unfinished)
    cut = assert_cut_off_consistent(P, text, TOOLS)
    assert (cut.calls, cut.normal_text) == ([ToolCall("get_weather", '{"city": "Par')], "Sure.\n")
    # a closing tag cut in half is not part of the value; a typed value is taken as received
    cut = assert_cut_off_consistent(P, text + "is\n</para", TOOLS)
    assert cut.calls == [ToolCall("get_weather", '{"city": "Paris\\n')]
    typed = "<tool_call>\n<function=get_weather>\n<parameter=days>\n12\n</param"
    assert assert_cut_off_consistent(P, typed, TOOLS).calls == [
        ToolCall("get_weather", '{"days": 12\n')
    ]


def test_cut_off_before_name_is_text() -> None:
    text = "hello <tool_call>\n<function=get_wea"
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert result.calls == []
    assert result.normal_text == text


@pytest.mark.slow  # a timing check: run by `tox -e slow`, never in the default suite
def test_long_arguments_cost_is_linear() -> None:
    def run(n: int) -> float:
        text = render([("write_file", {"path": "p", "content": "abc <x> \n" * n})])
        chunks = split(text, (4,))
        folded, elapsed = timed_stream(P, chunks, TOOLS)
        assert len(folded.calls) == 1
        return elapsed

    run(500)
    small, large = run(2_000), run(16_000)
    assert large < small * 8 * 3  # linear within noise (quadratic would be ~64x)
