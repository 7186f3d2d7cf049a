"""Kimi-K2 tool-call sections and call ids."""

from __future__ import annotations

import pytest

from turnout.plugins.tool_parsers.kimi_k2 import function_name
from turnout.tool_calls.types import ToolCall

from .harness import (
    Call,
    assert_stream_matches_complete,
    check_rendered,
    dumps,
    make_parser,
    tools_for,
)

P = "kimi_k2"
TOOLS = tools_for(["get_weather", "search", "exec"])
SB, SE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CB, AB, CE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def render(calls: list[Call]) -> str:
    """Kimi-K2's own rendering (ids ``functions.NAME:IDX``)."""
    body = "".join(f"{CB}functions.{n}:{i}{AB}{dumps(a)}{CE}" for i, (n, a) in enumerate(calls))
    return SB + body + SE


def render_spaced(calls: list[Call]) -> str:
    """Kimi-K2 output with spaces and line breaks around the id and the argument markers."""
    body = "".join(
        f"{CB} functions.{n}:{i} {AB} {dumps(a)}\n{CE}\n" for i, (n, a) in enumerate(calls)
    )
    return f"{SB}\n{body}{SE}"


def test_spaces_around_id_and_markers() -> None:
    text = f'{SB}{CB}  functions.search:0 \n{AB}\n {{"q": "x"}} {CE} {SE}'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([ToolCall("search", '{"q": "x"}')], "")
    calls: list[Call] = [("search", {"q": "x"}), ("get_weather", {"city": "Oslo"})]
    check_rendered(P, render_spaced, calls, before="Hm. ", after=" ok", tools=TOOLS)


def test_single_parallel_and_text() -> None:
    calls: list[Call] = [("search", {"q": "x"}), ("get_weather", {"city": "Oslo"})]
    check_rendered(P, render, calls, before="Let me look. ", after=" ok", tools=TOOLS)
    assert make_parser(P).call_id_style == "kimi"


@pytest.mark.parametrize(
    ("call_id", "name"),
    [
        ("functions.get_weather:0", "get_weather"),
        ("functions_get_weather_0", "get_weather"),
        ("functionsexec5", "exec"),
        ("get_weather:3", "get_weather"),
        ("functions.search", "search"),
    ],
)
def test_sanitised_ids_never_fail(call_id: str, name: str) -> None:
    text = f'{SB}{CB}{call_id}{AB}{{"a": 1}}{CE}{SE}'
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert [c.name for c in result.calls] == [name]


def test_names_without_tools() -> None:
    names = None
    assert function_name("functions.api.tools.search:1", names) == "api.tools.search"
    assert function_name("api.tools.search:1", names) == "api.tools.search"
    assert function_name("functions_get-weather_0", names) == "get-weather"
    assert function_name("functionsexec5", names) == "exec"
    assert function_name("functions", names) == "functions"


def test_unknown_function_and_stray_tokens() -> None:
    result = assert_stream_matches_complete(P, render([("rm", {})]), TOOLS)
    assert result.calls == []
    assert "functions.rm:0" in result.normal_text
    text = f"text {SE} more"
    assert assert_stream_matches_complete(P, text, TOOLS).normal_text == text
