"""Property tests for every JSON-family parser: streaming == one-shot for any chunking, the
rendered calls are found exactly, text around them is kept, arbitrary input never breaks."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .harness import (
    PROPERTY_SETTINGS,
    Call,
    Render,
    assert_calls,
    assert_cut_off_consistent,
    assert_no_text_lost,
    assert_stream_matches_complete,
    calls,
    chunk_sizes,
    noisy_text,
    plain_text,
    tools_for,
)
from .test_cohere import render as cohere
from .test_deepseek_v3 import render as deepseek_v3
from .test_deepseek_v31 import render as deepseek_v31
from .test_granite import render as granite
from .test_internlm import render as internlm
from .test_jamba import render as jamba
from .test_json_parser import render as json_render
from .test_kimi_k2 import render as kimi_k2
from .test_kimi_k2 import render_spaced as kimi_k2_spaced
from .test_llama import render as llama
from .test_mistral import render as mistral
from .test_mistral import render_compact as mistral_compact
from .test_qwen import render as qwen
from .test_xlam import render as xlam

#: (parser name, render, fragments for noisy input)
FORMATS: list[tuple[str, Render, tuple[str, ...]]] = [
    ("qwen", qwen, ("<tool_call>", "</tool_call>", "<tool_")),
    ("json", json_render, ('"arguments": ', '"name"')),
    ("llama", llama, ("<|python_tag|>", ";", '"parameters": ')),
    ("mistral", mistral, ("[TOOL_CALLS]", "[ARGS]", "[TOOL_")),
    ("mistral", mistral_compact, ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")),
    ("deepseek_v3", deepseek_v3, ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "```json")),
    (
        "deepseek_v31",
        deepseek_v31,
        ("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"),
    ),
    ("kimi_k2", kimi_k2, ("<|tool_call_begin|>", "<|tool_call_argument_begin|>", "functions.f:0")),
    ("kimi_k2", kimi_k2_spaced, ("<|tool_call_begin|>", " ", "<|tool_call_argument_begin|>")),
    ("cohere", cohere, ("<|START_ACTION|>", "<|END_ACTION|>", '"tool_name": ')),
    ("granite", granite, ("<|tool_call|>", "<tool_call>", "</tool_call>")),
    ("internlm", internlm, ("<|action_start|>", "<|plugin|>", "<|action_end|>")),
    ("jamba", jamba, ("<tool_calls>", "</tool_calls>")),
    ("xlam", xlam, ("```json", "[TOOL_CALLS]", "<tool_call>", "```")),
]
#: Default run: a few examples per format (seconds); ``-m slow`` runs many more.
FAST = settings(PROPERTY_SETTINGS, max_examples=12)
SLOW = settings(PROPERTY_SETTINGS, max_examples=300)
SPEEDS = [pytest.param(FAST, id="fast"), pytest.param(SLOW, id="many", marks=pytest.mark.slow)]
IDS = [f"{name}-{render.__name__}" for name, render, _ in FORMATS]
# Prose around calls: never contains a marker's first character or a bare JSON start.
TEXT = plain_text(avoid=("<", "[", "{", ";", "`"))


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize(("parser", "render", "fragments"), FORMATS, ids=IDS)
def test_rendered_calls_round_trip(
    speed: settings, parser: str, render: Render, fragments: tuple[str, ...]
) -> None:
    @speed
    @given(
        rendered=calls(),
        before=TEXT,
        after=TEXT,
        sizes=chunk_sizes(),
        with_tools=st.booleans(),
    )
    def check(
        rendered: list[Call], before: str, after: str, sizes: list[int], with_tools: bool
    ) -> None:
        tools = tools_for({n for n, _ in rendered}) if with_tools else None
        text = before + render(rendered) + after
        result = assert_stream_matches_complete(parser, text, tools, [sizes, (1,)])
        assert_calls(result, rendered)
        assert result.normal_text == before + after

    check()


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize(("parser", "render", "fragments"), FORMATS, ids=IDS)
def test_arbitrary_input_never_breaks(
    speed: settings, parser: str, render: Render, fragments: tuple[str, ...]
) -> None:
    @speed
    @given(text=noisy_text(fragments), with_tools=st.booleans())
    def check(text: str, with_tools: bool) -> None:
        tools = tools_for(["f", "name"]) if with_tools else None
        result = assert_no_text_lost(parser, text, tools)
        if tools is None and not result.calls:
            assert result.normal_text == text

    check()


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize(("parser", "render", "fragments"), FORMATS, ids=IDS)
def test_output_ending_anywhere_gives_only_complete_calls(
    speed: settings, parser: str, render: Render, fragments: tuple[str, ...]
) -> None:
    @speed
    @given(rendered=calls(), cut=st.floats(0, 1), sizes=chunk_sizes())
    def check(rendered: list[Call], cut: float, sizes: list[int]) -> None:
        text = render(rendered)
        text = text[: int(len(text) * cut)]
        result = assert_stream_matches_complete(parser, text, None, [sizes, (1,)])
        assert_calls(result, rendered[: len(result.calls)])  # never a partial call
        cut_off = assert_cut_off_consistent(parser, text, None, [sizes, (1,)])
        if len(cut_off.calls) > len(result.calls):  # the call open at the cut, as received
            assert cut_off.calls[-1].name == rendered[len(result.calls)][0]

    check()


SENTINEL = {"zz_sentinel": 12345}
_SENTINEL = re.compile(r'"zz_sentinel":\s*12345\s*\}')


@pytest.mark.parametrize("speed", SPEEDS)
@pytest.mark.parametrize(("parser", "render", "fragments"), FORMATS, ids=IDS)
def test_call_with_broken_arguments_is_text(
    speed: settings, parser: str, render: Render, fragments: tuple[str, ...]
) -> None:
    """The issue's malformed call: arguments whose string never closes (the end marker and all
    that follows end up inside it). That call is not returned; the calls before it are."""

    @speed
    @given(rendered=calls(), before=TEXT, after=TEXT, sizes=chunk_sizes(), with_tools=st.booleans())
    def check(
        rendered: list[Call], before: str, after: str, sizes: list[int], with_tools: bool
    ) -> None:
        good = rendered[:-1]
        broken_name = rendered[-1][0]
        text = render([*good, (broken_name, SENTINEL)])
        text, count = _SENTINEL.subn('"zz_sentinel": "unterminated', text)
        assert count == 1
        text = before + text + after
        tools = tools_for({n for n, _ in rendered}) if with_tools else None
        result = assert_stream_matches_complete(parser, text, tools, [sizes, (1,)])
        assert_calls(result, good)
        assert '"zz_sentinel": "unterminated' in result.normal_text
        assert result.normal_text.startswith(before)
        assert result.normal_text.endswith(after)

    check()
