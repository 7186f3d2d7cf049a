"""``turnout.testing``, the harness shipped to plugin authors: it passes correct parsers, catches
parsers whose streaming and one-shot results differ, and needs hypothesis only for properties."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from typing import ClassVar

import pytest
from hypothesis import example
from hypothesis import strategies as st

from turnout.reasoning import ReasoningResult, ReasoningStep
from turnout.testing import (
    assert_chunking_invariant,
    assert_cut_off_consistent,
    chunking_property,
    run_tool_parser,
    split,
    tools_for,
)
from turnout.testing.strategies import marker_text
from turnout.tool_calls import ToolCall, ToolCallDelta, ToolParseResult, ToolParseStep, Tools

TEXT = 'Sure.\nCALL get_weather {"city": "Paris"}\nDone.\n'


class CallLines:
    """``CALL name {json}`` lines are calls; holds back at most one unfinished line."""

    call_id_style: ClassVar[str] = "openai"
    needs_special_tokens: ClassVar[bool] = False

    def __init__(self) -> None:
        self._pending = ""
        self._count = 0

    @staticmethod
    def _call(line: str) -> ToolCall | None:
        name, _, arguments = line.removeprefix("CALL ").partition(" ")
        if not line.startswith("CALL ") or not name:
            return None
        try:
            json.loads(arguments)
        except ValueError:
            return None
        return ToolCall(name, arguments)

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        result = ToolParseResult("")
        for line in text.splitlines(keepends=True):
            call = self._call(line.rstrip("\n"))
            if call is None:
                result.normal_text += line
            else:
                result.calls.append(call)
        return result

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        self._pending += delta
        *lines, self._pending = self._pending.split("\n")
        return self._emit([line + "\n" for line in lines])

    def finish(self, truncated: bool = False) -> ToolParseStep:
        rest, self._pending = self._pending, ""
        return self._emit([rest] if rest else [])

    def _emit(self, lines: list[str]) -> ToolParseStep:
        step = ToolParseStep()
        for line in lines:
            call = self._call(line.rstrip("\n"))
            if call is None:
                step.normal_text += line
            else:
                step.calls.append(ToolCallDelta(self._count, call.name, call.arguments))
                self._count += 1
        return step


class ForgetfulCallLines(CallLines):
    """Looks at each chunk alone: a call split across chunks is missed."""

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        return self._emit([delta])


class ChattyCallLines(CallLines):
    """Streams each call's arguments in two pieces, naming the call every time."""

    repeat_name = True

    def _emit(self, lines: list[str]) -> ToolParseStep:
        step = ToolParseStep()
        for line in lines:
            call = self._call(line.rstrip("\n"))
            if call is None:
                step.normal_text += line
                continue
            half = len(call.arguments) // 2
            step.calls.append(ToolCallDelta(self._count, call.name, call.arguments[:half]))
            name = call.name if self.repeat_name else None
            step.calls.append(ToolCallDelta(self._count, name, call.arguments[half:]))
            self._count += 1
        return step


class Think:
    """``<think>…</think>`` at the start is reasoning (or everything, when started inside)."""

    start_marker: ClassVar[str] = "<think>"
    needs_special_tokens: ClassVar[bool] = False

    def __init__(self, start_in_reasoning: bool | None = None) -> None:
        self._inside = bool(start_in_reasoning)
        self._text = ""

    def parse_complete(self, text: str) -> ReasoningResult:
        body = text if self._inside else text.removeprefix("<think>")
        if not self._inside and body is text:
            return ReasoningResult("", text)
        reasoning, found, normal = body.partition("</think>")
        return ReasoningResult(reasoning, normal) if found else ReasoningResult(body, "")

    def parse_incremental(self, delta: str) -> ReasoningStep:
        self._text += delta  # holds everything: trivially chunking-invariant
        return ReasoningStep()

    def finish(self) -> ReasoningStep:
        result = self.parse_complete(self._text)
        return ReasoningStep(result.reasoning_text, result.normal_text)


class Hasty(Think):
    """Releases each chunk as normal text as soon as it arrives once past the first."""

    def parse_incremental(self, delta: str) -> ReasoningStep:
        if self._text:
            return ReasoningStep("", delta)
        return super().parse_incremental(delta)


def test_a_correct_tool_parser_passes_and_the_one_shot_result_is_returned() -> None:
    result = assert_chunking_invariant(CallLines, TEXT, tools=tools_for(["get_weather"]))
    assert result == ToolParseResult(
        "Sure.\nDone.\n", [ToolCall("get_weather", '{"city": "Paris"}')]
    )


def test_a_parser_that_depends_on_chunk_boundaries_is_caught() -> None:
    with pytest.raises(AssertionError) as info:
        assert_chunking_invariant(ForgetfulCallLines, TEXT)
    message = str(info.value)
    assert "ForgetfulCallLines: stream with chunk sizes (1,) differs from one-shot" in message
    assert repr(TEXT) in message


def test_the_delta_protocol_is_checked() -> None:
    with pytest.raises(AssertionError, match="call 0: name sent again"):
        assert_chunking_invariant(ChattyCallLines, TEXT)


def test_whole_calls_demands_each_call_in_one_delta() -> None:
    class PiecewiseCallLines(ChattyCallLines):
        repeat_name = False

    assert_chunking_invariant(PiecewiseCallLines, TEXT)  # a valid stream of pieces
    with pytest.raises(AssertionError, match="call sent in pieces"):
        assert_chunking_invariant(PiecewiseCallLines, TEXT, whole_calls=True)


def test_calls_must_have_json_arguments() -> None:
    class Credulous(CallLines):
        @staticmethod
        def _call(line: str) -> ToolCall | None:
            name, _, arguments = line.removeprefix("CALL ").partition(" ")
            return ToolCall(name, arguments) if line.startswith("CALL ") else None

    with pytest.raises(AssertionError, match="arguments are not JSON"):
        assert_chunking_invariant(Credulous, "CALL f {not json\n")


def test_reasoning_parsers_are_told_apart_and_checked() -> None:
    text = "<think>six times seven</think>42"
    assert assert_chunking_invariant(Think, text) == ReasoningResult("six times seven", "42")
    inside = functools.partial(Think, start_in_reasoning=True)
    assert assert_chunking_invariant(inside, "still thinking") == ReasoningResult(
        "still thinking", ""
    )
    with pytest.raises(AssertionError, match="Hasty: stream with chunk sizes"):
        assert_chunking_invariant(Hasty, text)


def test_a_cut_off_output_ends_like_any_other_when_the_parser_keeps_no_open_call() -> None:
    cut = TEXT + "CALL get_weather {"
    assert assert_cut_off_consistent(CallLines, cut) == CallLines().parse_complete(cut, None)


def test_finish_is_always_told_by_keyword_whether_the_output_was_cut_off() -> None:
    """One declared signature, ``finish(truncated=False)``: nothing probes what a parser's
    ``finish`` accepts (a wrapper's ``**kwargs`` hides nothing)."""
    told: list[object] = []

    class Recording(CallLines):
        def finish(self, *args: object, **kwargs: bool) -> ToolParseStep:
            told.append(kwargs.get("truncated"))
            return super().finish(*args, **kwargs)

    run_tool_parser(Recording(), ["CALL f {"], truncated=True)
    run_tool_parser(Recording(), ["CALL f {"])
    assert told == [True, False]


def test_split_cycles_the_sizes() -> None:
    assert split("abcdefgh", (3, 1)) == ["abc", "d", "efg", "h"]
    assert split("abc", (0,)) == ["a", "b", "c"]
    assert split("", (2,)) == []


def test_chunking_property_passes_a_correct_parser_and_finds_a_broken_one() -> None:
    texts = marker_text(["CALL f ", '{"a": 1}', "\n"])
    chunking_property(CallLines, texts, max_examples=30)()
    broken = chunking_property(ForgetfulCallLines, texts, max_examples=200)
    # Random texts need not hold a whole call: the explicit example makes the failure certain.
    with pytest.raises(AssertionError, match="differs from one-shot"):
        example(text='CALL f {"a": 1}\n', sizes=[3])(broken)()


#: The property as a plugin author writes it: one assignment collected by pytest.
test_the_example_parser_property = chunking_property(
    CallLines, st.text('CALL f{}"1 \n', max_size=30), max_examples=25
)


def _without_hypothesis(code: str) -> subprocess.CompletedProcess[str]:
    blocker = "import sys; sys.modules['hypothesis'] = None\n"
    return subprocess.run(
        [sys.executable, "-c", blocker + code], capture_output=True, text=True, check=False
    )


def test_hypothesis_is_optional_and_its_absence_says_what_to_install() -> None:
    plain = _without_hypothesis(
        "from turnout.testing import assert_chunking_invariant\nprint('imported')"
    )
    assert plain.returncode == 0, plain.stderr
    for code in (
        "import turnout.testing.strategies",
        "from turnout.testing import chunking_property\nchunking_property(object, None)",
    ):
        missing = _without_hypothesis(code)
        assert missing.returncode != 0
        assert "pip install 'turnout[testing]'" in missing.stderr
