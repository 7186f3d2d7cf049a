"""MiniMax-M2: ``<minimax:tool_call><invoke name=…><parameter name=…>value</parameter>…``."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from .harness import (
    Call,
    assert_calls,
    assert_stream_matches_complete,
    check_rendered,
    raw_value,
    typed_tool,
)

P = "minimax_m2"
TOOLS: list[dict[str, Any]] = [
    typed_tool("get_weather", city="string", days="integer", tags="array"),
    typed_tool("ping"),
]


def render(calls: list[Call]) -> str:
    """MiniMax-M2 output for ``calls`` (several invokes in one block; values XML-escaped)."""
    invokes = "".join(
        f'<invoke name="{name}">\n'
        + "".join(
            f'<parameter name="{k}">{escape(raw_value(v), quote=False)}</parameter>\n'
            for k, v in args.items()
        )
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


def test_entities_are_decoded_once() -> None:
    value = "Tom &amp; Jerry &lt;3 &quot;hi&quot; &#x1F642;&#33; &amp;lt; &bogus; &#0;"
    text = (
        f'<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">{value}'
        '</parameter>\n<parameter name="tags">[&quot;a&amp;b&quot;]</parameter>\n'
        "</invoke>\n</minimax:tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert json.loads(result.calls[0].arguments) == {
        "city": 'Tom & Jerry <3 "hi" 🙂! &lt; &bogus; &#0;',
        "tags": ["a&b"],
    }


def test_json_looking_values_stay_strings_without_a_schema() -> None:
    text = (
        '<minimax:tool_call>\n<invoke name="f">\n<parameter name="obj">{"y": 1}</parameter>\n'
        '<parameter name="arr">[1, 2]</parameter>\n<parameter name="q">"quoted"</parameter>\n'
        '<parameter name="n">5</parameter>\n<parameter name="b">true</parameter>\n'
        '<parameter name="z">None</parameter>\n<parameter name="id">007</parameter>\n'
        "</invoke>\n</minimax:tool_call>"
    )
    result = assert_stream_matches_complete(P, text, None)
    assert json.loads(result.calls[0].arguments) == {
        "obj": '{"y": 1}',
        "arr": "[1, 2]",
        "q": '"quoted"',
        "n": 5,
        "b": True,
        "z": None,
        "id": "007",
    }


def test_unicode_escapes_nested() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"properties": {"x": {"type": "object"}, "s": {"type": "string"}}},
            },
        }
    ]
    calls: list[Call] = [("f", {"x": {"y": [None, '\\"🙂 <a> &amp;']}, "s": "中文 <b>&\n"})]
    check_rendered(P, render, calls, tools=tools)


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
