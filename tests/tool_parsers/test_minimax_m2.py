"""MiniMax-M2: ``<minimax:tool_call><invoke name=…><parameter name=…>value</parameter>…``."""

from __future__ import annotations

import json
from typing import Any

from .harness import Call, assert_calls, assert_stream_matches_complete, check_rendered

P = "minimax_m2"
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "tags": {"type": "array"},
                }
            },
        },
    },
    {"type": "function", "function": {"name": "ping", "parameters": {"properties": {}}}},
]


def _raw(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render(calls: list[Call]) -> str:
    """MiniMax-M2 output for ``calls`` (several invokes in one block)."""
    invokes = "".join(
        f'<invoke name="{name}">\n'
        + "".join(f'<parameter name="{k}">{_raw(v)}</parameter>\n' for k, v in args.items())
        + "</invoke>\n"
        for name, args in calls
    )
    return f"<minimax:tool_call>\n{invokes}</minimax:tool_call>"


def test_single_call() -> None:
    text = (
        '<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Tokyo</parameter>\n'
        '<parameter name="days">5</parameter>\n<parameter name="tags">["a", 1]</parameter>\n'
        "</invoke>\n</minimax:tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (2,), (1_000,)])
    assert result.calls[0].arguments == '{"city": "Tokyo", "days": 5, "tags": ["a", 1]}'


def test_parallel_in_one_block_with_text_around() -> None:
    calls: list[Call] = [("get_weather", {"city": "A"}), ("ping", {}), ("get_weather", {"days": 1})]
    check_rendered(P, render, calls, before="On it.\n\n", after="\n\nAnything else?", tools=TOOLS)


def test_entities_are_not_decoded() -> None:
    text = render([("get_weather", {"city": "Tom &amp; Jerry &lt;3"})])
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert json.loads(result.calls[0].arguments) == {"city": "Tom &amp; Jerry &lt;3"}


def test_unicode_escapes_nested() -> None:
    check_rendered(P, render, [("f", {"x": {"y": [None, '\\"🙂']}, "s": "中文\n"})])


def test_invoke_without_name_is_text() -> None:
    text = "<minimax:tool_call>\n<invoke>\n</invoke>\n</minimax:tool_call>"
    result = assert_stream_matches_complete(P, text, None, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)


def test_unknown_function_only() -> None:
    text = "a " + render([("rm_rf", {"p": "/"})]) + " b"
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)


def test_stray_text_inside_block_is_kept() -> None:
    text = (
        '<minimax:tool_call>\n<invoke name="ping">\n</invoke>\nnote: done\n'
        '<invoke name="ping"></invoke></minimax:tool_call>'
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert_calls(result, [("ping", {}), ("ping", {})])
    assert result.normal_text == "\nnote: done\n"


def test_malformed_array_becomes_string() -> None:
    text = render([("get_weather", {"tags": "[1, 2"})])
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert json.loads(result.calls[0].arguments) == {"tags": "[1, 2"}
