"""The per-choice processor folds to the same answer however the worker chunks its tokens."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.server.chat_emit import ChatFolder

from .outputs import EOS, output_ids, outputs, processor


def run(ids: list[int], cuts: list[int], stops: list[str]) -> dict[str, object]:
    choice = processor(0, stops)
    folder = ChatFolder("id", "m", 0, 1)
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    for start, end in itertools.pairwise(bounds):
        delta = choice.push(ids[start:end])
        if delta is not None:
            folder.add(delta)
    tail, end = choice.finish("stop", EOS)
    if tail is not None:
        folder.add(tail)
    folder.add(end)
    return folder.response()["choices"][0]


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
