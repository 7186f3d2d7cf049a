"""The Responses renderer: the typed events a client folds give the response the one-shot answer
folds, however the worker chunked the output; items, statuses and usage."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.generation.outputs import EOS, arguments, output_ids, processor, prose
from turnout.generation.events import ChoiceDelta, ChoiceEnd, Event, ToolCallPiece, Usage
from turnout.responses.render import ResponsesRenderer

from .events import check_response, fold_events

_ID = re.compile(r"\b(msg|rs|fc)_[0-9a-f]{48}\b")


def start() -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "status": "in_progress",
        "model": "m",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }


def batches(text: str, cuts: list[int], finish: str = "stop") -> list[list[Event]]:
    """The events of ``text`` (qwen3 reasoning, qwen tool calls) cut into batches."""
    ids = output_ids(text)
    choice = processor()
    bounds = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    out: list[list[Event]] = []
    for begin, end in itertools.pairwise(bounds):
        delta = choice.push(ids[begin:end])
        if delta is not None:
            out.append([delta])
    tail, ended = choice.finish(finish, EOS)
    last: list[Event] = [tail] if tail is not None else []
    out.append([*last, ended, Usage(7, ended.completion_tokens, 0, ended.reasoning_tokens)])
    return out


def streamed(events: list[list[Event]]) -> dict[str, Any]:
    renderer = ResponsesRenderer(start())
    payloads = renderer.opening(0)
    for batch in events:
        payloads += renderer.stream(batch)
    payloads += renderer.closing()
    return fold_events(payloads)


def folded(events: list[list[Event]]) -> dict[str, Any]:
    renderer = ResponsesRenderer(start())
    for batch in events:
        renderer.fold(batch)
    return renderer.answer()


def same_ids(response: dict[str, Any]) -> dict[str, Any]:
    """The response with its item ids numbered in order (they are random)."""
    body = repr({**response, "completed_at": None})
    for n, found in enumerate(dict.fromkeys(m.group(0) for m in _ID.finditer(body))):
        body = body.replace(found, f"id{n}")
    result: dict[str, Any] = eval(body)
    return result


@st.composite
def outputs(draw: st.DrawFn) -> str:
    """Optional reasoning, prose, then up to two tool calls, each maybe followed by prose.

    Prose after a call when no prose came before it is left out: a parser reading the whole
    output in one step reports the text and the calls without their order, so the one-shot
    answer puts the message first while a token-by-token stream saw the call first.
    """
    text = ""
    if draw(st.booleans()):
        text += "<think>" + draw(prose) + "</think>"
    before = draw(prose)
    text += before
    for _ in range(draw(st.integers(0, 2))):
        call = {"name": "get_weather", "arguments": draw(arguments)}
        text += "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"
        if before.strip():
            text += draw(prose)
    return text


@settings(max_examples=60, deadline=None)
@given(outputs(), st.lists(st.integers(0, 400), max_size=10), st.lists(st.integers(0, 400)))
def test_the_stream_folds_to_the_one_shot_response_however_chunked(
    text: str, cuts: list[int], other_cuts: list[int]
) -> None:
    one_shot = folded(batches(text, other_cuts))
    assert same_ids(streamed(batches(text, cuts))) == same_ids(one_shot)
    check_response(one_shot)


def test_reasoning_text_and_calls_become_items_in_order() -> None:
    text = (
        "<think>Six times seven.</think>Let me check."
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Tokyo"}}\n</tool_call>'
    )
    ids = output_ids(text)
    response = streamed(batches(text, list(range(len(ids)))))
    kinds = [item["type"] for item in response["output"]]
    assert kinds == ["reasoning", "message", "function_call", "function_call"]
    reasoning, message, paris, tokyo = response["output"]
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Six times seven."}]
    assert reasoning["summary"] == []
    assert message["content"][0]["text"] == "Let me check."
    assert message["role"] == "assistant"
    assert (paris["name"], paris["arguments"]) == ("get_weather", '{"city": "Paris"}')
    assert paris["call_id"] != tokyo["call_id"]
    assert tokyo["arguments"] == '{"city": "Tokyo"}'
    assert {item["status"] for item in response["output"]} == {"completed"}
    assert response["status"] == "completed"
    assert response["usage"]["output_tokens"] == len(ids)
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] > 0
    assert response["usage"]["total_tokens"] == 7 + len(ids)


def test_the_token_limit_leaves_the_response_and_its_last_item_incomplete() -> None:
    response = streamed(batches("<think>a</think>once upon a time", [3, 9], finish="length"))
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [item["status"] for item in response["output"]] == ["completed", "incomplete"]
    assert response.get("completed_at") is None


def test_an_aborted_generation_fails_the_response() -> None:
    renderer = ResponsesRenderer(start())
    payloads = renderer.opening(0)
    payloads += renderer.stream(
        [ChoiceDelta(0, content="par"), ChoiceEnd(0, "abort", None, 1, 0), Usage(3, 1)]
    )
    payloads += renderer.closing()
    assert payloads[-1]["type"] == "response.failed"
    response = fold_events(payloads)
    assert response["status"] == "failed"
    assert response["error"]["code"] == "server_error"


def test_text_after_calls_joins_the_message_before_them() -> None:
    text = (
        "Let me check."
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        " Done."
    )
    ids = output_ids(text)
    token_by_token = streamed(batches(text, list(range(len(ids)))))
    assert [item["type"] for item in token_by_token["output"]] == ["message", "function_call"]
    assert token_by_token["output"][0]["content"][0]["text"] == "Let me check. Done."
    assert same_ids(token_by_token) == same_ids(folded(batches(text, [])))


def test_argument_pieces_join_their_call_even_after_another_item_started() -> None:
    events: list[Event] = [
        ChoiceDelta(0, tool_calls=[ToolCallPiece(0, "call_a", "f", '{"a"')]),
        ChoiceDelta(0, content="between"),
        ChoiceDelta(0, tool_calls=[ToolCallPiece(0, None, None, ": 1}")]),
        ChoiceEnd(0, "tool_calls", None, 3, 0),
        Usage(1, 3),
    ]
    renderer = ResponsesRenderer(start())
    renderer.fold(events)
    call = renderer.answer()["output"][0]
    assert call["arguments"] == '{"a": 1}'


async def test_the_finished_response_is_kept_before_the_last_event() -> None:
    kept: list[dict[str, Any]] = []

    async def keep(response: dict[str, Any]) -> None:
        kept.append(response)

    renderer = ResponsesRenderer(start(), keep=keep)
    renderer.stream([ChoiceDelta(0, content="hi"), ChoiceEnd(0, "stop", None, 1, 0), Usage(2, 1)])
    await renderer.complete()
    assert kept[0]["status"] == "completed"
    assert kept[0]["output"][0]["content"][0]["text"] == "hi"
    assert renderer.closing()[0]["response"] is kept[0]
