"""DeepSeek V3.2 DSML: ``<｜DSML｜function_calls><｜DSML｜invoke name=…><｜DSML｜parameter …>``."""

from __future__ import annotations

import json
from typing import Any

from turnout.tool_calls.types import ToolCall

from .harness import (
    Call,
    assert_calls,
    assert_cut_off_consistent,
    assert_stream_matches_complete,
    check_rendered,
    typed_tool,
)

P = "deepseek_v32"
BLOCK = "function_calls"
TOOLS: list[dict[str, Any]] = [typed_tool("get_weather", city="string", days="integer")]


def render_dsml(calls: list[Call], block: str) -> str:
    """DSML output for ``calls`` in ``<｜DSML｜{block}>`` (strings flagged ``string="true"``)."""
    invokes = []
    for name, args in calls:
        params = "".join(
            f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>\n'
            if isinstance(v, str)
            else f'<｜DSML｜parameter name="{k}" string="false">'
            f"{json.dumps(v, ensure_ascii=False)}</｜DSML｜parameter>\n"
            for k, v in args.items()
        )
        invokes.append(f'<｜DSML｜invoke name="{name}">\n{params}</｜DSML｜invoke>\n')
    return f"<｜DSML｜{block}>\n{''.join(invokes)}</｜DSML｜{block}>"


def render(calls: list[Call]) -> str:
    """DeepSeek V3.2 output for ``calls``."""
    return render_dsml(calls, BLOCK)


def test_single_call_with_string_flags() -> None:
    text = render([("get_weather", {"city": "42", "days": 3})])
    result = assert_stream_matches_complete(P, text, None, [(1,), (4,), (1_000,)])
    assert result.calls[0].arguments == '{"city": "42", "days": 3}'


def test_string_false_is_json_but_schema_string_wins() -> None:
    text = (
        f'<｜DSML｜{BLOCK}>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="false">7</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">7</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="extra">[1, {"a": "b"}]</｜DSML｜parameter>\n'
        f"</｜DSML｜invoke>\n</｜DSML｜{BLOCK}>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert result.calls[0].arguments == '{"city": "7", "days": 7, "extra": [1, {"a": "b"}]}'


def test_parallel_text_around_unicode_nested() -> None:
    calls: list[Call] = [
        ("get_weather", {"city": 'Zürich "中" \\ 🙂', "days": 1}),
        ("plan", {"steps": [{"a": None}, [True]]}),
    ]
    check_rendered(P, render, calls, before="Let me look.\n\n", after="\n")


def test_bare_json_body() -> None:
    text = (
        f'<｜DSML｜{BLOCK}>\n<｜DSML｜invoke name="get_weather">\n{{"city": "Oslo", "days": 2}}\n'
        '</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">{broken</｜DSML｜invoke>\n'
        f"</｜DSML｜{BLOCK}>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert [c.arguments for c in result.calls] == ['{"city": "Oslo", "days": 2}']
    # A body that is not a JSON object is not a call: its invoke stays text.
    assert result.normal_text == '<｜DSML｜invoke name="get_weather">{broken</｜DSML｜invoke>'


def test_v4_block_is_text_here() -> None:
    text = render_dsml([("get_weather", {"city": "x"})], "tool_calls")
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)


def test_unknown_function_and_empty_arguments() -> None:
    text = render([("get_weather", {}), ("nuke", {"x": 1})])
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert_calls(result, [("get_weather", {})])
    assert result.normal_text == (
        '<｜DSML｜invoke name="nuke">\n'
        '<｜DSML｜parameter name="x" string="false">1</｜DSML｜parameter>\n</｜DSML｜invoke>'
    )


def test_split_tags_never_leak_and_cut_off() -> None:
    text = "Sure" + render([("get_weather", {"city": "P"})])
    for sizes in [(1,), (2,), (3,)]:
        result = assert_stream_matches_complete(P, text, TOOLS, sizes)
        assert result.normal_text == "Sure"
    unfinished = assert_stream_matches_complete(P, text[:-30], TOOLS, [(1,), (1_000,)])
    assert (unfinished.calls, unfinished.normal_text) == ([], text[:-30])
    cut = assert_cut_off_consistent(P, text[:-30], TOOLS)
    assert cut.calls == [ToolCall("get_weather", '{"city": "P"')]
    assert cut.normal_text == "Sure"
