"""Seed-OSS: ``<seed:tool_call><function=NAME><parameter=KEY>value</parameter>…``."""

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
    tools_for,
    typed_tool,
)

P = "seed_oss"
TOOLS: list[dict[str, Any]] = [typed_tool("get_weather", city="string", days="integer")]


def render(calls: list[Call]) -> str:
    """Seed-OSS output for ``calls`` (one block per call; values on their own lines)."""
    blocks = []
    for name, args in calls:
        params = "".join(
            f"<parameter={k}>\n{raw_value(v)}\n</parameter>\n" for k, v in args.items()
        )
        blocks.append(
            f"<seed:tool_call>\n<function={name}>\n{params}</function>\n</seed:tool_call>"
        )
    return "\n".join(blocks)


def test_inline_values_single_call() -> None:
    text = (
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
        "<parameter=days>2</parameter>\n</function>\n</seed:tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (3, 1, 4), (1_000,)])
    assert result.calls[0].arguments == '{"city": "Paris", "days": 2}'


def test_parallel_unicode_nested_and_text_around() -> None:
    calls: list[Call] = [
        ("get_weather", {"city": 'Zürich 🙂 "q" \\ 中文', "days": 1}),
        ("plan", {"steps": [{"a": 1}, {"b": [True, None]}], "note": 'x"y'}),
    ]
    tools = TOOLS + tools_for(["plan"])
    tools[1]["function"]["parameters"]["properties"] = {"note": {"type": "string"}}
    check_rendered(P, render, calls, before="Thinking done.\n", after="\n", tools=tools)


def test_think_block_is_opaque_text() -> None:
    quoted = render([("get_weather", {"city": "X"})])
    text = f"<seed:think>maybe {quoted}?</seed:think>Answer: " + render(
        [("get_weather", {"city": "Y"})]
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (7,), (1_000,)])
    assert_calls(result, [("get_weather", {"city": "Y"})])
    assert result.normal_text == f"<seed:think>maybe {quoted}?</seed:think>Answer: "


def test_unknown_function_and_empty_arguments() -> None:
    unknown = render([("rm", {"path": "/"})])
    result = assert_stream_matches_complete(P, unknown + render([("get_weather", {})]), TOOLS)
    assert_calls(result, [("get_weather", {})])
    assert result.normal_text == unknown
    assert result.calls[0].arguments == "{}"


def test_malformed_value_and_cut_off() -> None:
    text = "<seed:tool_call>\n<function=get_weather>\n<parameter=days>\nmany\n</parameter>\n<para"
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)  # unfinished: not a call
    cut = assert_cut_off_consistent(P, text, TOOLS)
    assert cut.calls == [ToolCall("get_weather", '{"days": "many"')]
    result = assert_stream_matches_complete(P, text + "meter=city> Rome </parameter>\n</function>")
    assert_calls(result, [("get_weather", {"days": "many", "city": " Rome "})])


def test_split_tags_never_leak() -> None:
    text = "A" + render([("get_weather", {"city": "P"})]) + "B"
    for sizes in [(1,), (2,), (5,)]:
        result = assert_stream_matches_complete(P, text, TOOLS, sizes)
        assert result.normal_text == "AB"
