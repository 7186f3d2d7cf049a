"""GLM-4.5/4.6: ``<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>…``."""

from __future__ import annotations

import json
from typing import Any

import pytest

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

P = "glm45"
TOOLS: list[dict[str, Any]] = [
    typed_tool("get_weather", city="string", days="integer", path="string")
]


def render(calls: list[Call]) -> str:
    """GLM-4.5 output for ``calls`` (one block per call, tags on their own lines)."""
    blocks = []
    for name, args in calls:
        pairs = "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{raw_value(v)}</arg_value>\n"
            for k, v in args.items()
        )
        blocks.append(f"<tool_call>{name}\n{pairs}</tool_call>")
    return "\n".join(blocks)


def test_single_call() -> None:
    text = (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (2,), (1_000,)])
    assert result.calls[0].name == "get_weather"
    assert result.calls[0].arguments == '{"city": "Beijing", "days": 2}'


def test_parallel_calls_and_text_around() -> None:
    calls: list[Call] = [("get_weather", {"city": "A", "days": 1}), ("get_weather", {"city": "B"})]
    check_rendered(P, render, calls, before="I'll check both.\n", after="\n", tools=TOOLS)


def test_backslashes_and_escaped_json_survive() -> None:
    text = (
        "<tool_call>get_weather\n<arg_key>path</arg_key>\n<arg_value>C:\\Users\\n.txt</arg_value>\n"
        '<arg_key>meta</arg_key>\n<arg_value>{"q": "say \\"hi\\"", "p": "C:\\\\x"}</arg_value>\n'
        "</tool_call>"
    )
    result = assert_stream_matches_complete(P, text, TOOLS)
    args = json.loads(result.calls[0].arguments)
    assert args == {"path": "C:\\Users\\n.txt", "meta": {"q": 'say "hi"', "p": "C:\\x"}}


def test_unicode_nested_and_inference() -> None:
    calls: list[Call] = [("f", {"obj": {"k": ["中", 1.5, None]}, "n": -3, "b": False})]
    check_rendered(P, render, calls)


def test_no_arguments_and_unknown_function() -> None:
    result = assert_stream_matches_complete(P, "<tool_call>get_weather</tool_call>", TOOLS)
    assert_calls(result, [("get_weather", {})])
    unknown = "x<tool_call>launch\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>y"
    result = assert_stream_matches_complete(P, unknown, TOOLS, [(1,), (1_000,)])
    assert result.calls == []
    assert result.normal_text == unknown


def test_prose_tool_call_tag_released_early() -> None:
    text = "The <tool_call> tag wraps calls; this sentence is long enough to matter."
    result = assert_stream_matches_complete(P, text, None, [(1,), (1_000,)])
    assert result.normal_text == text
    # released as soon as the "name" has a space inside, not at the end of output
    from .harness import make_parser

    parser = make_parser(P)
    step = parser.parse_incremental("The <tool_call> tag wraps", None)
    assert step.normal_text == "The <tool_call> tag wraps"


def test_key_without_value_dropped_and_unfinished_call() -> None:
    text = (
        "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_key>city</arg_key>\n"
        "<arg_value>Rome</arg_value>\n<arg_key>days</arg_key><arg_value>4"
    )
    result = assert_stream_matches_complete(P, text + "</arg_value></tool_call>", TOOLS)
    assert_calls(result, [("get_weather", {"city": "Rome", "days": 4})])
    # Still open when the output ends: text; cut off by max_tokens: the call as received.
    result = assert_stream_matches_complete(P, text, TOOLS, [(1,), (1_000,)])
    assert (result.calls, result.normal_text) == ([], text)
    cut = assert_cut_off_consistent(P, text, TOOLS)
    assert cut.calls == [ToolCall("get_weather", '{"city": "Rome", "days": 4')]


def test_split_tags_never_leak() -> None:
    text = "a" + render([("get_weather", {"city": "P"})]) + "b"
    for sizes in [(1,), (2,), (3,)]:
        result = assert_stream_matches_complete(P, text, tools_for(["get_weather"]), sizes)
        assert result.normal_text == "ab"


TODO_TOOLS: list[dict[str, Any]] = [typed_tool("todo_write", todos="array", note="string")]
TODOS = [
    {"id": "1", "task": "Check file at C:\\Users\\test.txt", "status": "pending"},
    {"id": "2", "task": "Print \\n to see newline", "status": "in_progress"},
]


@pytest.mark.parametrize("parser", ["glm45", "glm47"])
@pytest.mark.parametrize("separator", ["\n", "\\n", ""])
def test_escaped_line_breaks_and_escaped_json(parser: str, separator: str) -> None:
    """What GLM models sometimes emit and SGLang accepts: line breaks written as the two
    characters ``\\n``, and an array of objects written with backslash-escaped quotes."""
    plain = json.dumps(TODOS)  # the Windows path and the literal \n are escaped in the JSON
    escaped = json.dumps(plain)[1:-1]  # [{\"id\": \"1\", \"task\": \"Check file at C:\\\\Users...
    for value in (plain, escaped):
        text = (
            f"<tool_call>todo_write{separator}<arg_key>todos</arg_key>{separator}"
            f"<arg_value>{value}</arg_value>{separator}<arg_key>note</arg_key>{separator}"
            f'<arg_value>C:\\Users\\n [{{\\"a\\": 1}}]</arg_value>{separator}</tool_call>'
        )
        result = assert_stream_matches_complete(parser, f"Ok.{text}", TODO_TOOLS)
        assert result.normal_text == "Ok."
        # string parameters stay verbatim, backslashes and all
        assert_calls(
            result, [("todo_write", {"todos": TODOS, "note": 'C:\\Users\\n [{\\"a\\": 1}]'})]
        )
    # Without a schema the escaped array is read too; an escaped string value is not unescaped.
    text = (
        f"<tool_call>f\\n<arg_key>a</arg_key>\\n<arg_value>{escaped}</arg_value>\\n"
        '<arg_key>s</arg_key><arg_value>\\"x\\"</arg_value></tool_call>'
    )
    result = assert_stream_matches_complete(parser, text, None)
    assert_calls(result, [("f", {"a": TODOS, "s": '\\"x\\"'})])
