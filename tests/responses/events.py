"""A client's fold of a Responses stream: every typed event checked against the official
client's types, sequence numbers counted, deltas joined and compared with their ``done``
events; the output built from the events must be the last event's response."""

from __future__ import annotations

import copy
from typing import Any

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

_EVENT = TypeAdapter(ResponseStreamEvent)
_LAST = ("response.completed", "response.incomplete", "response.failed")
#: Events of an MCP item's progress, and the MCP items whose end brings what the router found.
_MCP_STEPS = tuple(
    f"response.{item}.{step}"
    for item in ("mcp_call", "mcp_list_tools")
    for step in ("in_progress", "completed", "failed")
)
_MCP_RESULTS = ("mcp_call", "mcp_list_tools")


def check_event(event: dict[str, Any]) -> None:
    """One stream event, validated by the official client's types."""
    _EVENT.validate_python(event)


def check_response(body: dict[str, Any]) -> Response:
    """The response object, validated by the official client's model."""
    return Response.model_validate(body)


def fold_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The final response of a stream, after checking the stream's events."""
    output: dict[int, dict[str, Any]] = {}
    final: dict[str, Any] | None = None
    for number, event in enumerate(events):
        _EVENT.validate_python(event)
        assert event["sequence_number"] == number, event
        assert final is None, "events after the last one"
        kind = event["type"]
        if number < 2:
            assert kind == ("response.created", "response.in_progress")[number]
            assert event["response"]["status"] == "in_progress"
            continue
        index = event.get("output_index")
        if kind == "response.output_item.added":
            assert index == len(output)
            assert event["item"].get("status", "in_progress") == "in_progress"
            output[index] = copy.deepcopy(event["item"])
        elif kind == "response.content_part.added":
            output[index]["content"].append(copy.deepcopy(event["part"]))
        elif kind in ("response.output_text.delta", "response.reasoning_text.delta"):
            part = output[index]["content"][event["content_index"]]
            part["text"] += event["delta"]
            if kind == "response.output_text.delta":
                part["logprobs"].extend(event["logprobs"])
        elif kind in ("response.output_text.done", "response.reasoning_text.done"):
            assert output[index]["content"][event["content_index"]]["text"] == event["text"]
        elif kind == "response.content_part.done":
            assert output[index]["content"][event["content_index"]] == event["part"]
        elif kind == "response.function_call_arguments.delta":
            output[index]["arguments"] += event["delta"]
        elif kind == "response.function_call_arguments.done":
            assert output[index]["arguments"] == event["arguments"]
            assert output[index]["name"] == event["name"]
        elif kind == "response.mcp_call_arguments.delta":
            output[index]["arguments"] += event["delta"]
        elif kind == "response.mcp_call_arguments.done":
            assert output[index]["arguments"] == event["arguments"]
        elif kind in _MCP_STEPS:
            assert event["item_id"] == output[index]["id"]
        elif kind == "response.output_item.done":
            done = event["item"]
            assert done["id"] == output[index]["id"]
            if done["type"] in _MCP_RESULTS:  # what the router's call (or listing) found
                assert output[index]["type"] == done["type"]
            else:
                assert {**output[index], "status": done.get("status")} == {
                    **done,
                    "status": done.get("status"),
                }
            output[index] = done
        else:
            assert kind in _LAST, kind
            final = event["response"]
    assert final is not None, "the stream has no last event"
    assert final["output"] == [output[i] for i in sorted(output)]
    check_response(final)
    return final
