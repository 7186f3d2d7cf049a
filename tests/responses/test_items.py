"""Input items: checked, given ids, and read as chat messages."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from turnout.errors import ApiError
from turnout.responses.items import chat_messages, input_items


def messages(instructions: str | None, *items: Any, history: Any = ()) -> list[dict[str, Any]]:
    conversation = chat_messages(instructions, list(history), input_items(list(items)))
    return [msgspec.to_builtins(m) for m in conversation.messages]


def test_a_text_input_is_one_user_message_after_the_instructions() -> None:
    (item,) = input_items("hi")
    assert item["type"] == "message"
    assert item["id"].startswith("msg_")
    assert item["content"] == [{"type": "input_text", "text": "hi"}]
    conversation = chat_messages("Be brief.", [], [item])
    assert [msgspec.to_builtins(m) for m in conversation.messages] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert conversation.origins == ["instructions", "input[0]"]


def test_a_tool_round_trip_reads_as_the_chat_api_would_send_it() -> None:
    out = messages(
        None,
        {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "A call is needed."}],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Let me check.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "noon"}],
        },
    )
    assert out == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "reasoning_content": "A call is needed.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{}"},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "content": "sunny", "name": "get_weather", "tool_call_id": "c1"},
        {"role": "tool", "content": "noon", "name": "get_time", "tool_call_id": "c2"},
    ]


def test_calls_without_a_message_make_an_assistant_turn_of_their_own() -> None:
    out = messages(
        None,
        {"role": "user", "content": "a"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    )
    assert out[1]["role"] == "assistant"
    assert out[1]["reasoning_content"] == "plan"
    assert out[1]["tool_calls"][0]["id"] == "c1"
    assert "content" not in out[1]


def test_kept_items_come_first_and_name_previous_response_id() -> None:
    history = input_items("earlier")
    conversation = chat_messages(None, history, input_items("now"))
    assert conversation.origins == ["previous_response_id", "input[0]"]


def test_given_ids_are_kept_and_missing_ones_filled_in() -> None:
    items = input_items(
        [
            {"type": "message", "id": "msg_mine", "role": "user", "content": "x"},
            {"type": "function_call_output", "call_id": "c", "output": "y"},
        ]
    )
    assert items[0]["id"] == "msg_mine"
    assert items[1]["id"].startswith("fco_")


@pytest.mark.parametrize(
    ("item", "param", "code"),
    [
        ({"type": "item_reference", "id": "msg_1"}, "input[0].type", "unsupported_parameter"),
        ({"type": "web_search_call", "id": "ws"}, "input[0].type", "unsupported_parameter"),
        ({"role": "tool", "content": "x"}, "input[0].role", "invalid_value"),
        (
            {"role": "user", "content": [{"type": "input_file", "file_id": "f"}]},
            "input[0].content[0]",
            "unsupported_parameter",
        ),
        ({"role": "user", "content": 3}, "input[0].content", "invalid_value"),
        (
            {"type": "function_call", "call_id": "c", "name": "f"},
            "input[0].arguments",
            "invalid_value",
        ),
        (
            {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
            "input[0].encrypted_content",
            "invalid_encrypted_content",
        ),
        ({"content": "no role"}, "input[0]", "invalid_value"),
    ],
)
def test_bad_items_are_refused_naming_them(item: dict[str, Any], param: str, code: str) -> None:
    with pytest.raises(ApiError) as caught:
        input_items([item])
    assert caught.value.status == 400
    assert caught.value.param == param
    assert caught.value.code == code
