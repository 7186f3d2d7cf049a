"""The Messages renderer: its streamed events, folded as a client folds them, equal the one-shot
message, however the events are batched; blocks open and close in order."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from typing import Any

import pydantic
import pytest
from anthropic.types import RawMessageStreamEvent
from hypothesis import given
from hypothesis import strategies as st

from turnout.anthropic.render import MessagesRenderer
from turnout.errors import ApiError
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, ToolCallPiece, Usage

_EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)
TEXT = st.text(alphabet='ab {}"', min_size=1, max_size=6)


def renderer(stops: list[str] | None = None) -> MessagesRenderer:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
    }
    return MessagesRenderer(message, input_tokens=7, stop_sequences=stops)


@st.composite
def outputs(draw: st.DrawFn) -> list[Event]:
    """A choice's output: reasoning, text and calls in any order, then its end and usage."""
    events: list[Event] = []
    calls = 0
    for kind in draw(st.lists(st.sampled_from(["reasoning", "text", "call", "args"]))):
        if kind == "reasoning":
            events.append(ChoiceDelta(0, reasoning=draw(TEXT)))
        elif kind == "text":
            events.append(ChoiceDelta(0, content=draw(TEXT)))
        elif kind == "call":
            piece = ToolCallPiece(calls, f"call_{calls}", "f", '{"x": ')
            events.append(ChoiceDelta(0, tool_calls=[piece]))
            calls += 1
        elif calls:
            piece = ToolCallPiece(calls - 1, None, None, draw(TEXT))
            events.append(ChoiceDelta(0, tool_calls=[piece]))
    reason = draw(st.sampled_from(["stop", "length", "tool_calls"]))
    matched = draw(st.sampled_from([None, "STOP", 2]))
    events.append(ChoiceEnd(0, reason, matched, 9, 0))
    events.append(Usage(prompt_tokens=7, completion_tokens=9, cached_tokens=3))
    return events


def batches(events: list[Event], cuts: list[int]) -> list[list[Event]]:
    points = sorted({c % (len(events) + 1) for c in cuts} | {0, len(events)})
    return [events[a:b] for a, b in itertools.pairwise(points) if b > a]


def fold_stream(payloads: list[dict[str, Any]]) -> dict[str, Any]:
    """The message a client builds from the events (as the SDK's stream helper does)."""
    message: dict[str, Any] = {}
    json_of: dict[int, str] = {}
    for event in payloads:
        kind = event["type"]
        if kind == "message_start":
            message = copy.deepcopy(event["message"])
        elif kind == "content_block_start":
            assert event["index"] == len(message["content"])
            message["content"].append(copy.deepcopy(event["content_block"]))
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                json_of[event["index"]] = json_of.get(event["index"], "") + delta["partial_json"]
        elif kind == "content_block_stop":
            if event["index"] in json_of:
                try:
                    value = json.loads(json_of[event["index"]])
                except ValueError:
                    value = {}
                message["content"][event["index"]]["input"] = (
                    value if isinstance(value, dict) else {}
                )
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"].update(event["usage"])
    return message


@given(outputs(), st.lists(st.integers(0, 50)), st.lists(st.integers(0, 50)))
def test_streamed_events_folded_equal_the_one_shot_message(
    events: list[Event], cuts: list[int], other_cuts: list[int]
) -> None:
    streaming = renderer(["STOP"])
    payloads = list(streaming.opening(0))
    for batch in batches(events, cuts):
        payloads += streaming.stream(batch)
    asyncio.run(streaming.complete())
    payloads += streaming.closing()
    one_shot = renderer(["STOP"])
    for batch in batches(events, other_cuts):
        one_shot.fold(batch)
    asyncio.run(one_shot.complete())
    answer = one_shot.answer()
    assert fold_stream(payloads) == answer
    kinds = [p["type"] for p in payloads]
    assert kinds[:2] == ["message_start", "ping"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    opened = [p["index"] for p in payloads if p["type"] == "content_block_start"]
    closed = [p["index"] for p in payloads if p["type"] == "content_block_stop"]
    assert opened == closed == list(range(len(answer["content"])))
    for payload in payloads:
        if payload["type"] != "ping":
            _EVENTS.validate_python(payload)


def test_stop_reasons() -> None:
    def reason(end: ChoiceEnd) -> tuple[str, str | None]:
        r = renderer(["STOP"])
        r.fold([ChoiceDelta(0, content="x"), end])
        answer = r.answer()
        return answer["stop_reason"], answer["stop_sequence"]

    assert reason(ChoiceEnd(0, "stop", 2, 1, 0)) == ("end_turn", None)
    assert reason(ChoiceEnd(0, "stop", "STOP", 1, 0)) == ("stop_sequence", "STOP")
    assert reason(ChoiceEnd(0, "stop", "</s>", 1, 0)) == ("end_turn", None)  # the model's own
    assert reason(ChoiceEnd(0, "length", None, 1, 0)) == ("max_tokens", None)
    assert reason(ChoiceEnd(0, "tool_calls", None, 1, 0)) == ("tool_use", None)


def test_usage_counts_cached_input_apart() -> None:
    r = renderer()
    r.fold([ChoiceEnd(0, "stop", 2, 4, 0), Usage(10, 4, cached_tokens=6)])
    assert r.answer()["usage"] == {
        "input_tokens": 4,
        "output_tokens": 4,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 6,
    }


def test_an_aborted_generation_is_an_error() -> None:
    streaming = renderer()
    streaming.stream([ChoiceDelta(0, content="x"), ChoiceEnd(0, "abort", None, 1, 0)])
    [error] = streaming.closing()
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    one_shot = renderer()
    one_shot.fold([ChoiceDelta(0, content="x"), ChoiceEnd(0, "abort", None, 1, 0)])
    with pytest.raises(ApiError):
        one_shot.answer()
