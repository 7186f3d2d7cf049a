"""The bases every built-in parser is written on are public (``turnout.tool_calls``): a new
"marker + JSON" format is a subclass of a few lines, with the built-ins' rules for free."""

from __future__ import annotations

from collections.abc import Generator
from typing import ClassVar

from turnout.testing import assert_chunking_invariant, assert_cut_off_consistent, tools_for
from turnout.tool_calls import (
    FAILED,
    NAME_CHARS,
    BlockCallsParser,
    GrammarToolParser,
    ToolCall,
    XmlSyntax,
    XmlToolParser,
    attr_key,
    attr_name,
)


class ArrowCalls(BlockCallsParser):
    START_MARKERS: ClassVar[tuple[str, ...]] = (">>>",)
    END_MARKERS: ClassVar[tuple[str, ...]] = ("<<<",)
    needs_special_tokens: ClassVar[bool] = False


TOOLS = tools_for(["get_weather"])


def test_a_marker_json_format_is_a_few_declarative_lines() -> None:
    text = 'Checking.\n>>>{"name": "get_weather", "arguments": {"city": "Paris"}}<<<\nDone.'
    result = assert_chunking_invariant(ArrowCalls, text, tools=TOOLS, whole_calls=True)
    assert result.calls == [ToolCall("get_weather", '{"city": "Paris"}')]
    assert result.normal_text == "Checking.\n\nDone."


def test_the_subclass_keeps_the_built_in_rules() -> None:
    broken = 'Hi >>>{"name": "get_weather", "arguments": {"city": "Par'
    # Broken at the end of output: text, markers included; cut off by max_tokens: the open call.
    assert assert_chunking_invariant(ArrowCalls, broken, tools=TOOLS).normal_text == broken
    cut = assert_cut_off_consistent(ArrowCalls, broken, tools=TOOLS)
    assert cut.calls == [ToolCall("get_weather", '{"city": "Par')]
    other = '>>>{"name": "rm", "arguments": {}}<<<'
    assert assert_chunking_invariant(ArrowCalls, other, tools=TOOLS).normal_text == other


class CallColon(GrammarToolParser):
    """A format of its own written with the public helpers: ``CALL:name {json}``."""

    needs_special_tokens: ClassVar[bool] = False

    def grammar(self) -> Generator[None, None, None]:
        while True:
            if (yield from self.text_until(("CALL:",))) is None:
                return
            self.start_block("CALL:")
            found = yield from self.name_until((" ",), NAME_CHARS)
            if found is None or (yield from self.named_call(found[0])) == FAILED:
                self.release()  # not a call after all: its text, marker included, is text
            else:
                self.drop()  # the call's syntax is gone; what follows is text again


def test_a_grammar_of_its_own_uses_the_public_helpers() -> None:
    text = 'a CALL:get_weather {"city": "Oslo"} b CALL:nope'
    result = assert_chunking_invariant(CallColon, text, tools=TOOLS, whole_calls=True)
    assert result.calls == [ToolCall("get_weather", '{"city": "Oslo"}')]
    assert result.normal_text == "a  b CALL:nope"


class AngleCalls(XmlToolParser):
    """The example of XmlToolParser's docstring."""

    syntax = XmlSyntax(
        block_start="<calls>",
        block_end="</calls>",
        invoke_start="<invoke",
        invoke_end="</invoke>",
        name_end=">",
        parse_name=attr_name,
        param_start="<arg",
        key_end=">",
        parse_key=attr_key,
        param_end="</arg>",
    )


def test_an_xml_format_is_its_tags() -> None:
    text = 'Hi <calls><invoke name="get_weather"><arg name="days">3</arg></invoke></calls> bye'
    schema = {"type": "object", "properties": {"days": {"type": "integer"}}}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    result = assert_chunking_invariant(AngleCalls, text, tools=tools, whole_calls=True)
    assert result.calls == [ToolCall("get_weather", '{"days": 3}')]
    assert result.normal_text == "Hi  bye"
