"""The per-choice processor folds to the same answer however the worker chunks its tokens."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.generation.chat_render import ChatRenderer
from turnout.generation.choice import ChoiceProcessor

from .outputs import EOS, TOKENIZER, output_ids, outputs, processor

CALL = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'


def run(
    ids: list[int], cuts: list[int], stops: list[str], max_calls: int | None = None
) -> dict[str, Any]:
    choice = processor(0, stops, max_calls)
    folder = ChatRenderer("id", "m", 0, 1)
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    for start, end in itertools.pairwise(bounds):
        delta = choice.push(ids[start:end])
        if delta is not None:
            folder.fold([delta])
    tail, end = choice.finish("stop", EOS)
    if tail is not None:
        folder.fold([tail])
    folder.fold([end])
    return folder.answer()["choices"][0]


@settings(max_examples=80, deadline=None)
@given(outputs(), st.lists(st.integers(0, 400), max_size=12), st.sampled_from([[], ["STOP"]]))
def test_any_token_chunking_gives_the_one_chunk_answer(
    text: str, cuts: list[int], stops: list[str]
) -> None:
    ids = output_ids(text)
    assert run(ids, cuts, stops) == run(ids, [], stops)


def test_the_processor_separates_reasoning_calls_and_content() -> None:
    text = '<think>hm</think>Sure.<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    ids = output_ids(text)
    choice = run(ids, list(range(len(ids))), [])
    message = choice["message"]
    assert message["reasoning_content"] == "hm"
    assert message["content"] == "Sure."
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert message["tool_calls"][0]["id"] == "functions.f:0"
    assert choice["finish_reason"] == "tool_calls"


def every_cut(text: str, max_calls: int | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer token by token and in one piece (they must agree)."""
    ids = output_ids(text)
    streamed = run(ids, list(range(len(ids))), [], max_calls)
    assert streamed == run(ids, [], [], max_calls)
    return streamed, streamed["message"]


@settings(max_examples=80, deadline=None)
@given(outputs(), st.lists(st.integers(0, 400), max_size=12), st.sampled_from([None, 1]))
def test_whitespace_around_calls_and_one_call_agree_however_chunked(
    text: str, cuts: list[int], max_calls: int | None
) -> None:
    ids = output_ids(text)
    choice = run(ids, cuts, [], max_calls)
    assert choice == run(ids, [], [], max_calls)
    message = choice["message"]
    calls = message.get("tool_calls", [])
    if max_calls is not None:
        assert len(calls) <= max_calls
    if calls:
        content = message["content"]
        assert content is None or content == content.rstrip() != ""


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("<think>hm</think>\n\n" + CALL, None),  # whitespace only: null
        ("I will look that up for you.\n" + CALL, "I will look that up for you."),
        ("Sure. \n" + CALL + "\n" + CALL + "\n", "Sure."),
        ("\n" + CALL + "\nDone.\n", "\n\nDone."),  # text after a call keeps its separator
        ("No call here.\n\n", "No call here.\n\n"),  # without calls nothing is dropped
        ("\n \n", "\n \n"),
    ],
)
def test_whitespace_beside_calls_is_not_content(text: str, content: str | None) -> None:
    _, message = every_cut(text)
    assert message["content"] == content


def test_held_whitespace_is_released_when_text_follows() -> None:
    choice = processor()
    deltas = [choice.push(output_ids(piece)[:-1]) for piece in ("Line one.\n", "\n", "Two.")]
    assert [d.content if d else "" for d in deltas] == ["Line one.", "", "\n\nTwo."]


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    second = CALL.replace('"f"', '"g"')
    choice, message = every_cut("Both:\n" + CALL + "\n" + second, max_calls=1)
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["f"]
    assert message["content"] == "Both:"
    assert choice["finish_reason"] == "tool_calls"
    _, both = every_cut("Both:\n" + CALL + "\n" + second)
    assert [json.loads(c["function"]["arguments"]) for c in both["tool_calls"]] == [{"a": 1}] * 2


def plain_deltas(ids: list[int], cuts: list[int], keep_token_ids: bool) -> list[tuple[str, int]]:
    """Content and running token count of each delta with content of a parser-less choice,
    then its end."""
    choice = ChoiceProcessor(
        0,
        decoder=TOKENIZER.incremental_detokenizer(skip_special_tokens=False),
        hidden_stop_ids=TOKENIZER.eos_token_ids,
        keep_token_ids=keep_token_ids,
    )
    seen: list[tuple[str, int]] = []
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    for start, end in itertools.pairwise(bounds):
        delta = choice.push(ids[start:end])
        if delta is not None and delta.content:
            seen.append((delta.content, delta.completion_tokens))
    tail, last = choice.finish("stop", EOS)
    if tail is not None and tail.content:
        seen.append((tail.content, tail.completion_tokens))
    seen.append((last.finish_reason, last.completion_tokens))
    return seen


@settings(max_examples=80, deadline=None)
@given(outputs(), st.lists(st.integers(0, 400), max_size=12))
def test_a_plain_choice_s_short_push_gives_the_full_push_s_deltas(
    text: str, cuts: list[int]
) -> None:
    # Kept token ids take the full path (their deltas may carry ids alone); nothing else
    # differs.
    ids = output_ids(text)
    assert plain_deltas(ids, cuts, keep_token_ids=False) == plain_deltas(ids, cuts, True)
