"""GLM-4.7/5: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>``."""

from __future__ import annotations

import json
from typing import Any

from .harness import (
    Call,
    assert_calls,
    assert_stream_matches_complete,
    check_rendered,
    raw_value,
    typed_tool,
)

P = "glm47"
TOOLS: list[dict[str, Any]] = [typed_tool("search", q="string", k="integer")]


def render(calls: list[Call]) -> str:
    """GLM-4.7 output for ``calls`` (no line breaks between tags)."""
    return "".join(
        f"<tool_call>{name}"
        + "".join(
            f"<arg_key>{k}</arg_key><arg_value>{raw_value(v)}</arg_value>" for k, v in args.items()
        )
        + "</tool_call>"
        for name, args in calls
    )


def test_single_and_parallel() -> None:
    text = (
        "<tool_call>search<arg_key>q</arg_key><arg_value>42</arg_value>"
        "<arg_key>k</arg_key><arg_value>5</arg_value></tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (4,), (1_000,)])
    assert result.calls[0].arguments == '{"q": "42", "k": 5}'
    check_rendered(P, render, [("search", {"q": "a"}), ("search", {"q": "b", "k": 2})], tools=TOOLS)


def test_text_between_and_around() -> None:
    text = "Hi " + render([("search", {"q": "x"})]) + " and " + render([("search", {})]) + " bye"
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert result.normal_text == "Hi  and  bye"
    assert_calls(result, [("search", {"q": "x"}), ("search", {})])


def test_unicode_escapes_nested() -> None:
    check_rendered(P, render, [("f", {"q": {"x": 'line\nnext "q" 🙂'}, "l": [1, [2]]})])


def test_string_value_verbatim_whitespace() -> None:
    text = "<tool_call>search<arg_key>q</arg_key><arg_value>\n  padded \n</arg_value></tool_call>"
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert json.loads(result.calls[0].arguments) == {"q": "\n  padded \n"}


def test_glm45_layout_also_parsed() -> None:
    text = "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n</tool_call>"
    assert_calls(assert_stream_matches_complete(P, text, TOOLS), [("search", {"q": "x"})])


def test_unknown_function_and_malformed_json() -> None:
    text = "<tool_call>other<arg_key>q</arg_key><arg_value>1</arg_value></tool_call>"
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([], text)
    bad = '<tool_call>f<arg_key>o</arg_key><arg_value>{"a": </arg_value></tool_call>'
    result = assert_stream_matches_complete(P, bad, None)
    assert json.loads(result.calls[0].arguments) == {"o": '{"a": '}
