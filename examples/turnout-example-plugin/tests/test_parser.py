"""The parser proves what every turnout parser must: streaming equals one-shot, for any
chunking, and calls are released whole once valid."""

from turnout_example_plugin.parser import BracketCallsParser

from turnout.testing import (
    assert_chunking_invariant,
    assert_cut_off_consistent,
    chunking_property,
    tools_for,
)
from turnout.testing.strategies import marker_text
from turnout.tool_calls import ToolCall

TOOLS = tools_for(["get_weather"])
CALL = '[call]{"name": "get_weather", "arguments": {"city": "Paris"}}[/call]'


def test_a_call_between_text() -> None:
    result = assert_chunking_invariant(
        BracketCallsParser, f"Checking.\n{CALL}\nDone.", tools=TOOLS, whole_calls=True
    )
    assert result.calls == [ToolCall("get_weather", '{"city": "Paris"}')]
    assert result.normal_text == "Checking.\n\nDone."


def test_broken_and_unknown_calls_stay_text() -> None:
    broken = '[call]{"name": "get_weather", "arguments": {"city": '
    assert assert_chunking_invariant(BracketCallsParser, broken, tools=TOOLS).normal_text == broken
    unknown = CALL.replace("get_weather", "delete_everything")
    assert assert_chunking_invariant(BracketCallsParser, unknown, tools=TOOLS).calls == []


def test_an_output_cut_off_by_max_tokens_keeps_the_open_call() -> None:
    cut_text = CALL[: CALL.index("Paris") + 3]
    cut = assert_cut_off_consistent(BracketCallsParser, cut_text, tools=TOOLS)
    assert cut.calls == [ToolCall("get_weather", '{"city": "Par')]


# Random texts around the format's markers, cut into random chunks.
test_any_chunking = chunking_property(
    BracketCallsParser,
    marker_text(["[call]", "[/call]", '{"name": "f", "arguments": {"a": 1}}', "["]),
    whole_calls=True,
)
