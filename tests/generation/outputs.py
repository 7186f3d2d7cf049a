"""Model outputs for property tests of the output pipeline: reasoning, prose and tool calls
(Qwen formats), with the demo tokenizer and the parsers that read them."""

from __future__ import annotations

import json

from hypothesis import strategies as st

import turnout
from turnout.demo_model import path as demo_path
from turnout.generation.choice import CallIds, ChoiceProcessor
from turnout.tokenizer import ModelTokenizer
from turnout.tokenizer.stops import StopStringMatcher

TOKENIZER = ModelTokenizer.from_dir(demo_path())
PLUGINS = turnout.load_plugins()
EOS = next(iter(TOKENIZER.eos_token_ids))

words = st.sampled_from(["hello", " world", "é", "🎉", "\n", " {", "}", "<", "think", "STOP", "x"])
prose = st.lists(words, max_size=8).map("".join)
keys = st.sampled_from(["a", "city", "n"])
arguments = st.dictionaries(keys, st.integers() | st.text(max_size=5), max_size=3)


@st.composite
def outputs(draw: st.DrawFn) -> str:
    """Optional reasoning, then prose with up to two tool calls in between."""
    text = ""
    if draw(st.booleans()):
        text += "<think>" + draw(prose) + "</think>"
    text += draw(prose)
    for _ in range(draw(st.integers(0, 2))):
        call = {"name": "get_weather", "arguments": draw(arguments)}
        text += "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
        text += draw(prose)
    return text


def output_ids(text: str) -> list[int]:
    """The tokens of ``text`` as the model would end them (EOS last)."""
    return [*TOKENIZER.encode(text, add_special_tokens=False), EOS]


def processor(
    index: int = 0, stops: list[str] | None = None, max_calls: int | None = None
) -> ChoiceProcessor:
    """A choice processor with the qwen3 reasoning and qwen tool parsers, deterministic call
    ids and logprob tokens."""
    return ChoiceProcessor(
        index,
        decoder=TOKENIZER.incremental_detokenizer(skip_special_tokens=False),
        stops=StopStringMatcher(stops) if stops else None,
        reasoning=PLUGINS.reasoning_parsers.create("qwen3"),
        tool_parser=PLUGINS.tool_parsers.create("qwen"),
        call_ids=CallIds("kimi"),
        hidden_stop_ids=TOKENIZER.eos_token_ids,
        token_piece=TOKENIZER.pieces.piece,
        max_calls=max_calls,
    )
