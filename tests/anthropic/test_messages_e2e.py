"""The Messages API end to end: the official ``anthropic`` client (``messages.create``,
``messages.stream``, ``count_tokens``) over HTTP against the router and a simulated worker
whose script plays the model (thinking, tool calls). Every streamed event is validated against
the client's own event types, and a stream folded by the client equals the one-shot answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pydantic
import pytest
import yaml
from anthropic.types import RawMessageStreamEvent

from tests.server.conftest import SCRIPT
from tests.server.harness import MODEL, Router, run_router

RULES = [
    {"match": "sunny, 21 degrees", "reply": "It is sunny in Paris."},
    {"match": "fail loudly", "reply": "Oops."},
    *SCRIPT["rules"],
]
TOOLS: list[Any] = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }
]
KEY = "sk-ant-test"
_EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RawMessageStreamEvent)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    script = tmp_path_factory.mktemp("sim") / "script.yaml"
    script.write_text(yaml.safe_dump({"rules": RULES}))
    with run_router(
        {"server": {"api_keys": [KEY]}},
        sims=1,
        sim_kwargs={"script": script},
        model={
            "tool_parser": "qwen",
            "reasoning_parser": "qwen3",
            "aliases": ["claude-sonnet-4-5"],
        },
    ) as running:
        yield running


@pytest.fixture
def client(router: Router) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=router.base_url, api_key=KEY, max_retries=0)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def without_id(message: anthropic.types.Message) -> dict[str, Any]:
    """The message without what differs between two requests: its ids, and how much of the
    prompt the worker's prefix cache held (the total of input tokens stays)."""
    body = message.model_dump()
    body.pop("id")
    usage = body["usage"]
    usage["input_tokens"] += usage.pop("cache_read_input_tokens") or 0
    for block in body["content"]:
        if block["type"] == "tool_use":
            assert block.pop("id")
    return body


def raw_events(router: Router, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, data)`` pairs of a streamed answer, read without the client."""
    events = []
    with httpx.stream(
        "POST",
        f"{router.base_url}/v1/messages",
        json={**body, "stream": True},
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
        timeout=30,
    ) as response:
        assert response.status_code == 200, response.read()
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[len("data: ") :])))
    return events


def test_plain_text(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model=MODEL, max_tokens=64, messages=user("hello there"))
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    [block] = message.content
    assert block.type == "text"
    assert "hello there" in block.text
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0
    assert message.usage.cache_read_input_tokens is not None
    assert message.id.startswith("msg_")


def test_an_alias_names_the_model_and_the_answer_echoes_it(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model="claude-sonnet-4-5", max_tokens=16, messages=user("say something")
    )
    assert message.model == "claude-sonnet-4-5"
    assert message.content


@pytest.fixture
def chunking(router: Router, request: pytest.FixtureRequest) -> Iterator[int]:
    """The sim's tokens per streamed chunk, for one test."""
    tokens: int = request.param
    router.sims[0].knobs.update({"tokens_per_chunk": tokens})
    yield tokens
    router.sims[0].knobs.update({"tokens_per_chunk": 1})


@pytest.mark.parametrize("chunking", [1, 3], indirect=True)
@pytest.mark.parametrize(
    "text",
    ["hello there", "ponder this", "plan ahead for the weather", "stopper", "long story"],
)
def test_a_stream_folded_equals_the_one_shot_answer(
    client: anthropic.Anthropic, router: Router, text: str, chunking: int
) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 40,
        "messages": user(text),
        "tools": TOOLS,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stop_sequences": ["STOP"],
    }
    one_shot = client.messages.create(**body)
    with client.messages.stream(**body) as stream:
        for event in stream:
            assert event.type  # the helper built each event from the client's types
        folded = stream.get_final_message()
    assert without_id(folded) == without_id(one_shot)
    events = raw_events(router, body)
    names = [name for name, _ in events]
    for name, data in events:
        assert data["type"] == name
        if name != "ping":  # not one of the client's types: it skips pings
            _EVENTS.validate_python(data)
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    starts = [data["index"] for name, data in events if name == "content_block_start"]
    stops = [data["index"] for name, data in events if name == "content_block_stop"]
    assert starts == stops == list(range(len(one_shot.content)))


def test_thinking_blocks(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=user("ponder this"),
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    thinking, text = message.content
    assert thinking.type == "thinking"
    assert thinking.thinking == "Six times seven."
    assert text.type == "text"
    assert text.text == "The answer is 42."
    omitted = client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=user("ponder this"),
        thinking={"type": "adaptive", "display": "omitted"},  # type: ignore[typeddict-item]
    )
    assert [b.type for b in omitted.content] == ["thinking", "text"]
    assert omitted.content[0].thinking == ""  # type: ignore[union-attr]


def test_thinking_disabled_switches_the_template_off(
    client: anthropic.Anthropic, router: Router
) -> None:
    client.messages.create(
        model=MODEL, max_tokens=8, messages=user("hi"), thinking={"type": "disabled"}
    )
    prompt = router.sims[0].requests[-1].tokenized.original_text
    assert "<think>\n\n</think>" in prompt


def test_a_tool_round_trip(client: anthropic.Anthropic, router: Router) -> None:
    messages: list[Any] = user("What is the weather in Paris?")
    first = client.messages.create(model=MODEL, max_tokens=200, messages=messages, tools=TOOLS)
    assert first.stop_reason == "tool_use"
    text, call = first.content
    assert text.type == "text"
    assert text.text.startswith("Let me check.")
    assert call.type == "tool_use"
    assert call.name == "get_weather"
    assert call.input == {"city": "Paris", "days": 3}
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 degrees"}
            ],
        },
    ]
    final = client.messages.create(model=MODEL, max_tokens=200, messages=messages, tools=TOOLS)
    assert final.stop_reason == "end_turn"
    assert final.content[0].type == "text"
    assert final.content[0].text == "It is sunny in Paris."
    prompt = router.sims[0].requests[-1].tokenized.original_text
    assert '"city": "Paris"' in prompt
    assert "sunny, 21 degrees" in prompt


def test_tool_choice(client: anthropic.Anthropic) -> None:
    forced = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=user("What is the weather in Paris?"),
        tools=TOOLS,
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    assert forced.stop_reason == "tool_use"
    assert [b.type for b in forced.content] == ["tool_use"]
    assert forced.content[0].input["city"] == "Paris"  # type: ignore[union-attr]
    none = client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=user("hello there"),
        tools=TOOLS,
        tool_choice={"type": "none"},
    )
    assert none.stop_reason == "end_turn"
    one = client.messages.create(
        model=MODEL,
        max_tokens=400,
        messages=user("both cities please"),
        tools=TOOLS,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    assert [b.type for b in one.content] == ["tool_use"]


def test_streamed_tool_input_arrives_as_json_deltas(router: Router) -> None:
    events = raw_events(
        router,
        {"model": MODEL, "max_tokens": 200, "messages": user("weather please"), "tools": TOOLS},
    )
    starts = [d for n, d in events if n == "content_block_start"]
    assert [s["content_block"]["type"] for s in starts] == ["text", "tool_use"]
    pieces = [
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"
    ]
    assert json.loads("".join(pieces)) == {"city": "Paris", "days": 3}
    [delta] = [d for n, d in events if n == "message_delta"]
    assert delta["delta"]["stop_reason"] == "tool_use"


def test_stop_sequences_and_max_tokens(client: anthropic.Anthropic) -> None:
    stopped = client.messages.create(
        model=MODEL, max_tokens=64, messages=user("stopper"), stop_sequences=["STOP"]
    )
    assert stopped.stop_reason == "stop_sequence"
    assert stopped.stop_sequence == "STOP"
    assert stopped.content[0].text == "alpha beta "  # type: ignore[union-attr]
    cut = client.messages.create(model=MODEL, max_tokens=5, messages=user("long story"))
    assert cut.stop_reason == "max_tokens"
    assert cut.usage.output_tokens == 5


def test_a_huge_max_tokens_is_clamped_not_refused(client: anthropic.Anthropic) -> None:
    # Claude Code's cap, past the demo model's context of 8192 tokens.
    with client.messages.stream(model=MODEL, max_tokens=64000, messages=user("hi")) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "end_turn"


def test_an_assistant_turn_last_is_continued(client: anthropic.Anthropic, router: Router) -> None:
    client.messages.create(
        model=MODEL,
        max_tokens=8,
        messages=[*user("hello"), {"role": "assistant", "content": "Well,"}],
    )
    prompt = router.sims[0].requests[-1].tokenized.original_text
    assert prompt.rstrip().endswith("Well,")


def test_system_blocks_and_cache_control(client: anthropic.Anthropic, router: Router) -> None:
    client.messages.create(
        model=MODEL,
        max_tokens=8,
        system=[
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Answer in French.", "cache_control": {"type": "ephemeral"}},
        ],
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
        metadata={"user_id": "someone"},
    )
    prompt = router.sims[0].requests[-1].tokenized.original_text
    assert "You are terse.\n\nAnswer in French." in prompt


def test_count_tokens(client: anthropic.Anthropic) -> None:
    counted = client.messages.count_tokens(model=MODEL, messages=user("hello there"), tools=TOOLS)
    message = client.messages.create(
        model=MODEL, max_tokens=4, messages=user("hello there"), tools=TOOLS
    )
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_errors_are_the_clients_exceptions(client: anthropic.Anthropic, router: Router) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=MODEL, max_tokens=8, messages=[])
    assert bad.value.body["type"] == "error"  # type: ignore[index]
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    missing_cap = httpx.post(  # the client refuses it itself
        f"{router.base_url}/v1/messages",
        json={"model": MODEL, "messages": user("hi")},
        headers={"x-api-key": KEY},
    )
    assert missing_cap.status_code == 400
    assert missing_cap.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in missing_cap.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError, match="frobnicate"):
        client.messages.create(
            model=MODEL, max_tokens=8, messages=user("hi"), extra_body={"frobnicate": 1}
        )
    with pytest.raises(anthropic.BadRequestError, match="web_search"):
        client.messages.create(
            model=MODEL,
            max_tokens=8,
            messages=user("hi"),
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
        )
    with pytest.raises(anthropic.BadRequestError, match=r"messages\[1\].content\[0\]"):
        client.messages.create(
            model=MODEL,
            max_tokens=8,
            messages=[*user("hi"), {"role": "assistant", "content": [{"type": "bogus"}]}],
        )
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="no-such-model", max_tokens=8, messages=user("hi"))
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    wrong = anthropic.Anthropic(base_url=router.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        wrong.messages.create(model=MODEL, max_tokens=8, messages=user("hi"))


def test_other_routes_keep_openais_error_shape(router: Router) -> None:
    answer = httpx.post(
        f"{router.base_url}/v1/chat/completions",
        json={"model": MODEL, "messages": []},
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 400
    assert "type" not in answer.json()
    assert answer.json()["error"]["code"]


def test_a_bearer_key_works_too(router: Router) -> None:
    answer = httpx.post(
        f"{router.base_url}/v1/messages",
        json={"model": MODEL, "max_tokens": 8, "messages": user("hi")},
        headers={"authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert answer.status_code == 200
    assert answer.json()["type"] == "message"


def test_history_blocks_reach_the_template(client: anthropic.Anthropic, router: Router) -> None:
    """Thinking in an assistant turn is its reasoning (redacted thinking is opaque: dropped),
    a system turn between the others is a system message, an error result says so."""
    client.messages.create(
        model=MODEL,
        max_tokens=8,
        tools=TOOLS,
        messages=[
            *user("weather in Paris"),
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "I should call it.", "signature": ""},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "no such city"}],
                        "is_error": True,
                    },
                    {"type": "text", "text": "try again"},
                ],
            },
            {"role": "system", "content": "Be brief."},  # type: ignore[typeddict-item]
            *user("go on"),
        ],
    )
    prompt = router.sims[0].requests[-1].tokenized.original_text
    assert "Error: no such city" in prompt
    assert "opaque" not in prompt
    assert prompt.index("no such city") < prompt.index("try again") < prompt.index("Be brief.")
