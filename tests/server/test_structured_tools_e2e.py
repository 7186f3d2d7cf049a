"""Structured output beside tools, as agent frameworks send it: a format with a forced tool
(the tool wins) and ``required`` over tools whose parameters use ``$defs``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai

from .conftest import MODEL, TOOLS
from .harness import Router

FORMAT = {
    "type": "json_schema",
    "json_schema": {
        "name": "answer",
        "schema": {"type": "object", "properties": {"answer": {"type": "string"}}},
    },
}
NESTED = {
    "type": "function",
    "function": {
        "name": "book_trip",
        "parameters": {
            "type": "object",
            "properties": {"leg": {"$ref": "#/$defs/Leg"}},
            "required": ["leg"],
            "$defs": {
                "Leg": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "nights": {"type": "integer"}},
                    "required": ["city", "nights"],
                }
            },
        },
    },
}


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def test_a_forced_tool_wins_over_the_response_format(client: openai.OpenAI) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in (named, "required"):
        reply = client.chat.completions.create(
            model=MODEL, messages=user("hi"), tools=TOOLS, tool_choice=choice,  # type: ignore[arg-type]
            response_format=FORMAT,  # type: ignore[arg-type]
        )  # fmt: skip
        (call,) = reply.choices[0].message.tool_calls or []
        assert call.function.name == "get_weather"
        assert "city" in json.loads(call.function.arguments)


def test_required_resolves_definitions_of_nested_parameters(
    client: openai.OpenAI, router: Router
) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("go"), tools=[*TOOLS, NESTED], tool_choice="required",  # type: ignore[list-item]
    )  # fmt: skip
    calls = reply.choices[0].message.tool_calls or []
    assert calls
    for call in calls:
        arguments = json.loads(call.function.arguments)
        if call.function.name == "book_trip":
            assert set(arguments["leg"]) == {"city", "nights"}
    schemas = [json.loads(v) for sim in router.sims for kind, v in sim.constraints if v]
    assert any(s.get("$defs", {}).get("Leg") for s in schemas if isinstance(s, dict))


def test_conflicting_definitions_are_a_400_naming_them(router: Router) -> None:
    other: dict[str, Any] = json.loads(json.dumps(NESTED))
    other["function"]["name"] = "book_hotel"
    other["function"]["parameters"]["$defs"]["Leg"] = {"type": "string"}
    body = {
        "model": MODEL, "messages": user("go"), "tools": [NESTED, other],
        "tool_choice": "required",
    }  # fmt: skip
    response = httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 400
    error = response.json()["error"]
    assert "$defs/Leg" in error["message"]
    assert error["param"] == "tools"


def test_the_worker_keeps_to_the_script_where_it_satisfies_the_constraint(
    client: openai.OpenAI,
) -> None:
    """The sim answers a constrained request with the scripted reply when it fits: the tool
    the script calls under ``required``, the scripted JSON under a format."""
    reply = client.chat.completions.create(
        model=MODEL, messages=user("the weather, please"), tools=[NESTED, *TOOLS],  # type: ignore[list-item]
        tool_choice="required",
    )  # fmt: skip
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    answer = client.chat.completions.create(
        model=MODEL, messages=user("json answer please"), response_format=FORMAT,  # type: ignore[arg-type]
    )  # fmt: skip
    assert json.loads(answer.choices[0].message.content or "") == {"answer": "forty-two"}


def sent_tags(router: Router) -> list[dict[str, Any]]:
    return [
        json.loads(v) for s in router.sims for kind, v in s.constraints if kind == "structural_tag"
    ]


def test_strict_tools_under_auto_are_kept_to_their_schemas(
    client: openai.OpenAI, router: Router
) -> None:
    strict = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": True}}]
    reply = client.chat.completions.create(
        model=MODEL, messages=user("the weather in Paris"), tools=strict,  # type: ignore[arg-type]
    )  # fmt: skip
    (call,) = reply.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    (tag,) = [t["format"] for t in sent_tags(router) if t["format"]["type"] == "triggered_tags"]
    assert tag["triggers"] == ["<tool_call>"]
    (only,) = tag["tags"]
    assert '"name": "get_weather"' in only["begin"]
    assert only["content"]["json_schema"] == TOOLS[0]["function"]["parameters"]
    assert not tag["at_least_one"]


def test_a_format_beside_tools_lets_the_model_call_them_or_answer_in_the_format(
    client: openai.OpenAI, router: Router
) -> None:
    called = client.chat.completions.create(
        model=MODEL, messages=user("the weather in Paris"), tools=TOOLS,  # type: ignore[arg-type]
        response_format=FORMAT,  # type: ignore[arg-type]
    )  # fmt: skip
    (call,) = called.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather"
    assert called.choices[0].finish_reason == "tool_calls"
    (tag,) = [t["format"] for t in sent_tags(router) if t["format"]["type"] == "or"]
    assert tag["elements"][0]["at_least_one"]
    assert tag["elements"][1]["json_schema"] == FORMAT["json_schema"]["schema"]  # type: ignore[index]
    answered = client.chat.completions.create(
        model=MODEL, messages=user("json answer please"), tools=TOOLS,  # type: ignore[arg-type]
        response_format=FORMAT,  # type: ignore[arg-type]
    )  # fmt: skip
    assert answered.choices[0].message.tool_calls is None
    assert json.loads(answered.choices[0].message.content or "") == {"answer": "forty-two"}
