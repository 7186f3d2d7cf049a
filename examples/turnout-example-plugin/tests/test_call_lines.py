"""The example parser proves what every turnout parser must: streaming == one-shot."""

from turnout_example_plugin.parser import CallLinesParser

from turnout.testing import assert_chunking_invariant, chunking_property, tools_for
from turnout.testing.strategies import marker_text
from turnout.tool_calls import ToolCall

TEXT = 'Checking.\nCALL get_weather {"city": "Paris"}\nDone.'


def test_stream_equals_one_shot():
    result = assert_chunking_invariant(CallLinesParser, TEXT, tools=tools_for(["get_weather"]))
    assert result.calls == [ToolCall("get_weather", '{"city": "Paris"}')]
    assert result.normal_text == "Checking.\nDone."


# Random texts around the format's markers, cut into random chunks.
test_any_chunking = chunking_property(CallLinesParser, marker_text(["CALL ", "\n", '{"a": 1}']))
