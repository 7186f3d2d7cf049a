"""The per-choice processor folds to the same answer however the worker chunks its tokens."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

import turnout
from turnout.demo_model import path as demo_path
from turnout.server.chat_emit import ChatFolder
from turnout.server.choice import CallIds, ChoiceProcessor
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
    text = ""
    if draw(st.booleans()):
        text += "<think>" + draw(prose) + "</think>"
    text += draw(prose)
    for _ in range(draw(st.integers(0, 2))):
        call = {"name": "get_weather", "arguments": draw(arguments)}
        text += "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
        text += draw(prose)
    return text


def run(ids: list[int], cuts: list[int], stops: list[str]) -> dict[str, object]:
    processor = ChoiceProcessor(
        0,
        decoder=TOKENIZER.incremental_detokenizer(skip_special_tokens=False),
        stops=StopStringMatcher(stops) if stops else None,
        reasoning=PLUGINS.reasoning_parsers.create("qwen3"),
        tool_parser=PLUGINS.tool_parsers.create("qwen"),
        call_ids=CallIds("kimi"),  # deterministic ids
        hidden_stop_ids=TOKENIZER.eos_token_ids,
    )
    folder = ChatFolder("id", "m", 0, 1)
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    for start, end in itertools.pairwise(bounds):
        delta = processor.push(ids[start:end])
        if delta is not None:
            folder.add(delta)
    tail, end = processor.finish("stop", EOS)
    if tail is not None:
        folder.add(tail)
    folder.add(end)
    return folder.response()["choices"][0]


@settings(max_examples=80, deadline=None)
@given(outputs(), st.lists(st.integers(0, 400), max_size=12), st.sampled_from([[], ["STOP"]]))
def test_any_token_chunking_gives_the_one_chunk_answer(
    text: str, cuts: list[int], stops: list[str]
) -> None:
    ids = [*TOKENIZER.encode(text, add_special_tokens=False), EOS]
    assert run(ids, cuts, stops) == run(ids, [], stops)


def test_the_processor_separates_reasoning_calls_and_content() -> None:
    text = '<think>hm</think>Sure.<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    ids = [*TOKENIZER.encode(text, add_special_tokens=False), EOS]
    choice = run(ids, list(range(len(ids))), [])
    message = choice["message"]
    assert message["reasoning_content"] == "hm"
    assert message["content"] == "Sure."
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert message["tool_calls"][0]["id"] == "functions.f:0"
    assert choice["finish_reason"] == "tool_calls"
