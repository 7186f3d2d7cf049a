"""Chat completions end to end: the official openai client → turnout → simulated workers."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from .conftest import MODEL, TOOLS
from .harness import Router


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def collect(stream: openai.Stream) -> dict[str, object]:
    """Fold a chat stream the way a client would."""
    content, reasoning, finish, usage = [], [], {}, None
    calls: dict[int, dict[str, str]] = {}
    roles = 0
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.role:
                roles += 1
            if delta.content:
                content.append(delta.content)
            extra = getattr(delta, "reasoning_content", None)
            if extra:
                reasoning.append(extra)
            for call in delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                if call.id:
                    entry["id"] = call.id
                if call.function and call.function.name:
                    entry["name"] = call.function.name
                if call.function and call.function.arguments:
                    entry["arguments"] += call.function.arguments
            if choice.finish_reason:
                finish[choice.index] = choice.finish_reason
    return {"content": "".join(content), "reasoning": "".join(reasoning), "calls": calls,
            "finish": finish, "usage": usage, "roles": roles}  # fmt: skip


def test_plain_chat_echoes_the_user_turn(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=user("Hello there, router"))
    assert reply.choices[0].message.content == "Hello there, router"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.id.startswith("chatcmpl-")


def test_streaming_matches_non_streaming(client: openai.OpenAI) -> None:
    once = client.chat.completions.create(model=MODEL, messages=user("Stream me a 🎉 party"))
    stream = client.chat.completions.create(
        model=MODEL, messages=user("Stream me a 🎉 party"), stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    folded = collect(stream)
    assert folded["content"] == once.choices[0].message.content == "Stream me a 🎉 party"
    assert folded["finish"] == {0: "stop"}
    assert folded["roles"] == 1
    assert folded["usage"].completion_tokens == once.usage.completion_tokens


def test_n_choices_are_distinct_and_complete(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=user("pick a word"), n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.finish_reason in ("stop", "length") for c in reply.choices)
    assert all(c.message.content for c in reply.choices)
    stream = collect(
        client.chat.completions.create(model=MODEL, messages=user("pick a word"), n=3, stream=True)
    )
    assert set(stream["finish"]) == {0, 1, 2}


def test_max_tokens_ends_with_length(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("tell me a long story"), max_tokens=5
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 5


def test_stop_string_is_enforced_by_the_router_and_aborts_the_worker(
    client: openai.OpenAI, router: Router
) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=user("stopper please"),
        stop=["STOP"],
        extra_headers={"x-request-id": "stop-abort-1"},
    )
    choice = reply.choices[0]
    assert choice.message.content == "alpha beta "
    assert choice.finish_reason == "stop"
    assert choice.model_extra["matched_stop"] == "STOP"
    router.wait_until(lambda: any("stop-abort-1" in rid for s in router.sims for rid in s.aborted))


def test_stop_string_streaming_and_no_stop_trim(client: openai.OpenAI) -> None:
    folded = collect(
        client.chat.completions.create(
            model=MODEL, messages=user("stopper"), stop="STOP", stream=True
        )
    )
    assert folded["content"] == "alpha beta "
    kept = client.chat.completions.create(
        model=MODEL, messages=user("stopper"), stop="STOP", extra_body={"no_stop_trim": True}
    )
    assert kept.choices[0].message.content == "alpha beta STOP"


def test_tool_call_parsed_in_both_modes(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("what is the weather in Paris?"), tools=TOOLS
    )
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls"
    assert message.content == "Let me check."
    (call,) = message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "days": 3}
    assert call.id.startswith("call_")
    assert len(call.id) == 5 + 24

    folded = collect(
        client.chat.completions.create(
            model=MODEL, messages=user("what is the weather in Paris?"), tools=TOOLS, stream=True
        )
    )
    assert folded["content"] == "Let me check."
    assert folded["finish"] == {0: "tool_calls"}
    assert [c["name"] for c in folded["calls"].values()] == ["get_weather"]
    assert folded["calls"][0]["arguments"] == call.function.arguments


def test_parallel_calls_keep_their_order(client: openai.OpenAI) -> None:
    folded = collect(
        client.chat.completions.create(
            model=MODEL, messages=user("forecast for both cities"), tools=TOOLS, stream=True
        )
    )
    assert [json.loads(folded["calls"][i]["arguments"])["city"] for i in (0, 1)] == [
        "Paris",
        "Tokyo",
    ]
    ids = {c["id"] for c in folded["calls"].values()}
    assert len(ids) == 2


def test_whitespace_beside_a_call_is_not_content(client: openai.OpenAI) -> None:
    """ "\n\n" after the reasoning and before the call: content is null, streamed or not."""
    messages = user("plan ahead, then call")
    reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    message = reply.choices[0].message
    assert message.content is None
    assert message.model_extra["reasoning_content"] == "A call is needed."
    assert len(message.tool_calls) == 1
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, stream=True
    )
    folded = collect(stream)
    assert folded["content"] == ""
    assert len(folded["calls"]) == 1


def test_parallel_tool_calls_false_gives_one_call(client: openai.OpenAI, router: Router) -> None:
    request: dict[str, Any] = {
        "model": MODEL,
        "messages": user("forecast for both cities"),
        "tools": TOOLS,
        "parallel_tool_calls": False,
    }
    reply = client.chat.completions.create(**request)
    (call,) = reply.choices[0].message.tool_calls
    assert json.loads(call.function.arguments)["city"] == "Paris"
    assert reply.choices[0].finish_reason == "tool_calls"
    folded = collect(client.chat.completions.create(**request, stream=True))
    assert [c["arguments"] for c in folded["calls"].values()] == [call.function.arguments]
    assert folded["finish"] == {0: "tool_calls"}

    required = client.chat.completions.create(**request | {"tool_choice": "required"})
    assert len(required.choices[0].message.tool_calls) == 1
    schemas = [json.loads(text) for sim in router.sims for kind, text in sim.constraints]
    assert any(schema.get("maxItems") == 1 for schema in schemas)


def test_brace_answer_that_is_no_call_reaches_the_client(client: openai.OpenAI) -> None:
    folded = collect(
        client.chat.completions.create(
            model=MODEL, messages=user("answer with a brace"), tools=TOOLS, stream=True
        )
    )
    assert folded["content"] == "{not a call, just braces}"
    assert folded["calls"] == {}


def test_tool_choice_required_constrains_the_worker(client: openai.OpenAI, router: Router) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("hello"), tools=TOOLS, tool_choice="required"
    )
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert "city" in json.loads(call.function.arguments)
    kinds = [kind for sim in router.sims for kind, _ in sim.constraints]
    assert "json_schema" in kinds


def test_named_tool_choice_returns_that_call(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("hi"), tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )  # fmt: skip
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments), dict)
    assert reply.choices[0].finish_reason == "tool_calls"


def test_reasoning_is_separated_and_counted(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(model=MODEL, messages=user("ponder this"))
    message = reply.choices[0].message
    assert message.model_extra["reasoning_content"] == "Six times seven."
    assert message.content == "The answer is 42."
    assert reply.usage.completion_tokens_details.reasoning_tokens > 0
    folded = collect(
        client.chat.completions.create(model=MODEL, messages=user("ponder this"), stream=True)
    )
    assert folded["reasoning"] == "Six times seven."
    assert folded["content"] == "The answer is 42."


def test_reasoning_split_off_when_thinking_is_disabled(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("ponder this"),
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )  # fmt: skip
    assert "reasoning_content" not in (reply.choices[0].message.model_extra or {})
    assert "<think>" in reply.choices[0].message.content


def test_logprobs_in_openai_shape(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("score these words"), logprobs=True, top_logprobs=2
    )
    entries = reply.choices[0].logprobs.content
    assert entries
    assert "".join(e.token for e in entries).startswith("score")
    assert all(e.logprob <= 0 for e in entries)
    assert all(len(e.top_logprobs) == 2 for e in entries)


def chat(**extra: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "x"}], **extra}


NAMED_UNKNOWN = {"type": "function", "function": {"name": "nope"}}


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL, "messages": []}, 400, "messages"),
        (chat(temperature=-1), 400, "temperature"),
        (chat(top_p=0), 400, "top_p"),
        (chat(n=0), 400, "n"),
        (chat(max_tokens=0), 400, "max_tokens"),
        (chat(top_logprobs=3), 400, "top_logprobs"),
        (
            {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]},
            400,
            "messages[0].role",
        ),
        (chat(tools=TOOLS, tool_choice=NAMED_UNKNOWN), 400, "tool_choice"),
        (chat(model="no-such-model"), 404, "model"),
        ({"model": MODEL, "messages": "not a list"}, 400, "messages"),
    ],
)
def test_bad_requests_get_openai_errors(
    router: Router, body: dict[str, object], status: int, param: str
) -> None:
    response = httpx.post(f"{router.base_url}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param
    assert error["message"]
    assert error["type"]


def test_openai_client_raises_typed_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=user("x"))
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=user("x"), temperature=-3)


def test_request_id_is_echoed_and_used_for_the_worker(router: Router) -> None:
    response = httpx.post(
        f"{router.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": user("id check")},
        headers={"x-request-id": "my-trace-77"},
        timeout=10,
    )
    assert response.headers["x-request-id"] == "my-trace-77"
    assert response.json()["id"] == "my-trace-77"
    # the worker gets the client's id made unique, so equal client ids never collide there
    worker_ids = [r.request_id for s in router.sims for r in s.requests]
    assert any(rid.startswith("my-trace-77-") for rid in worker_ids)


def test_response_format_json_schema_reaches_the_worker(
    client: openai.OpenAI, router: Router
) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
    }
    reply = client.chat.completions.create(
        model=MODEL,
        messages=user("give me json"),
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    )
    assert isinstance(json.loads(reply.choices[0].message.content)["answer"], int)
    sent = [json.loads(value) for sim in router.sims for kind, value in sim.constraints]
    assert schema in sent


def test_allowed_tools_required_limits_the_choice(client: openai.OpenAI) -> None:
    other = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
    reply = client.chat.completions.create(
        model=MODEL,
        messages=user("hello"),
        tools=[*TOOLS, other],
        tool_choice={
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "required",
                "tools": [{"type": "function", "function": {"name": "get_time"}}],
            },
        },
    )
    (call,) = reply.choices[0].message.tool_calls
    assert call.function.name == "get_time"


def test_one_shot_answers_ask_the_worker_for_one_message(
    client: openai.OpenAI, router: Router
) -> None:
    def sent(request_id: str) -> Any:
        return next(
            r for s in router.sims for r in s.requests if r.request_id.startswith(request_id)
        )

    client.chat.completions.create(
        model=MODEL, messages=user("plain one-shot"), extra_headers={"x-request-id": "one-shot"}
    )
    assert sent("one-shot-").stream is False
    client.chat.completions.create(
        model=MODEL, messages=user("stopper"), stop=["STOP"],
        extra_headers={"x-request-id": "one-shot-stops"},
    )  # fmt: skip
    watched = sent("one-shot-stops-")
    assert watched.stream is True  # turnout watches for its stop strings and aborts early
    assert watched.sampling_params.stream_interval == 16
    list(
        client.chat.completions.create(
            model=MODEL, messages=user("streamed"), stream=True,
            extra_headers={"x-request-id": "streamed-req"},
        )
    )  # fmt: skip
    streamed = sent("streamed-req-")
    assert streamed.stream is True
    assert not streamed.sampling_params.HasField("stream_interval")
