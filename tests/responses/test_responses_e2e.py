"""The Responses API end to end: the official openai client (``responses.create``, ``stream``,
``parse``, ``retrieve``, ``delete``, ``input_items``) over HTTP against the router and a
simulated worker. Streams are also read raw: every event named, checked against the client's
types and folded (tests/responses/events.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pydantic
import pytest
import yaml

from tests.server.conftest import SCRIPT
from tests.server.harness import MODEL, Router, run_router

from .events import check_event, check_response, fold_events

RULES = [
    {"match": "sunny, 21 degrees", "reply": "It is sunny in Paris."},
    *SCRIPT["rules"],
]
TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }
]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    script = tmp_path_factory.mktemp("sim") / "script.yaml"
    script.write_text(yaml.safe_dump({"rules": RULES}))
    with run_router(
        sims=1,
        sim_kwargs={"script": script},
        model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
    ) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def last_prompt(router: Router) -> str:
    text: str = router.sims[0].requests[-1].tokenized.original_text
    return text


def post(router: Router, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{router.base_url}/v1/responses", json={"model": MODEL, **body}, timeout=30)


def raw_stream(router: Router, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream's events as sent: each ``event:`` line names its payload's type."""
    events = []
    with httpx.stream(
        "POST",
        f"{router.base_url}/v1/responses",
        json={"model": MODEL, "stream": True, **body},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    assert "[DONE]" not in text
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        if not lines:
            continue
        assert lines[0].startswith("event: "), block
        assert lines[1].startswith("data: "), block
        data = json.loads(lines[1][len("data: ") :])
        assert data["type"] == lines[0][len("event: ") :]
        events.append(data)
    return events


def without_ids(response: dict[str, Any]) -> list[Any]:
    """The output's content, ids and times aside."""
    return [
        {k: v for k, v in item.items() if k not in ("id", "call_id")} for item in response["output"]
    ]


def test_a_text_input_answers_a_valid_response(router: Router) -> None:
    reply = post(router, {"input": "Hello there, router", "instructions": "Be brief."})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    response = check_response(body)
    assert response.output_text == "Hello there, router"
    assert response.status == "completed"
    assert response.id.startswith("resp_")
    assert body["object"] == "response"
    assert body["model"] == MODEL
    assert body["instructions"] == "Be brief."
    assert body["completed_at"] >= body["created_at"]
    (message,) = body["output"]
    assert message["type"] == "message"
    assert message["status"] == "completed"
    usage = body["usage"]
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] >= 0
    assert usage["output_tokens_details"]["reasoning_tokens"] == 0
    prompt = last_prompt(router)
    assert prompt.index("Be brief.") < prompt.index("Hello there, router")


def test_the_stream_is_typed_events_that_fold_to_the_one_shot_response(router: Router) -> None:
    body = {"input": "ponder this", "instructions": "Think."}
    events = raw_stream(router, body)
    kinds = [event["type"] for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for kind in (
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ):
        assert kind in kinds
    streamed = fold_events(events)
    one_shot = post(router, body).json()
    assert without_ids(streamed) == without_ids(one_shot)
    # (The second request finds the first's prefix in the worker's cache.)
    cached = ("input_tokens_details",)
    assert {k: v for k, v in streamed["usage"].items() if k not in cached} == {
        k: v for k, v in one_shot["usage"].items() if k not in cached
    }


def test_the_official_client_streams_with_its_helper_and_raw(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="ponder the stream") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "The answer is 42."
    raw = client.responses.create(model=MODEL, input="Hello again", stream=True)
    numbers, last = [], None
    for event in raw:
        numbers.append(event.sequence_number)
        last = event
    assert numbers == list(range(len(numbers)))
    assert last is not None
    assert last.type == "response.completed"
    assert last.response.output_text == "Hello again"


def test_reasoning_becomes_a_reasoning_item_before_the_message(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="ponder", reasoning={"effort": "low"})
    reasoning, message = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.content is not None
    assert [part.text for part in reasoning.content] == ["Six times seven."]
    assert reasoning.summary == []
    assert message.type == "message"
    assert response.output_text == "The answer is 42."
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens > 0
    assert response.reasoning is not None
    assert response.reasoning.effort == "low"


@pytest.mark.parametrize("stream", [False, True])
def test_a_function_call_round_trip_with_previous_response_id(
    client: openai.OpenAI, router: Router, stream: bool
) -> None:
    def create(**fields: Any) -> Any:
        if not stream:
            return client.responses.create(model=MODEL, tools=TOOLS, **fields)
        with client.responses.stream(model=MODEL, tools=TOOLS, **fields) as events:
            return events.get_final_response()

    first = create(input="What is the weather in Paris?")
    message, call = first.output
    assert message.type == "message"
    assert first.output_text == "Let me check."
    assert call.type == "function_call"
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris", "days": 3}
    assert call.call_id.startswith("call_")
    assert first.status == "completed"
    second = create(
        previous_response_id=first.id,
        input=[
            {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 degrees"}
        ],
    )
    assert second.output_text == "It is sunny in Paris."
    assert second.previous_response_id == first.id
    prompt = last_prompt(router)
    question = prompt.index("What is the weather in Paris?")
    assert question < prompt.index("<tool_call>", question) < prompt.index("sunny, 21 degrees")


def test_function_call_arguments_stream_as_deltas(router: Router) -> None:
    events = raw_stream(router, {"input": "weather in Paris, please", "tools": TOOLS})
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert "".join(e["delta"] for e in deltas) == done["arguments"]
    assert done["name"] == "get_weather"
    final = fold_events(events)
    assert final["output"][-1]["arguments"] == done["arguments"]


@pytest.mark.parametrize(
    ("tool_choice", "input_text"),
    [("required", "Say hello"), ({"type": "function", "name": "get_weather"}, "Say hi")],
)
def test_tool_choice_forces_a_call(
    client: openai.OpenAI, tool_choice: Any, input_text: str
) -> None:
    response = client.responses.create(
        model=MODEL, input=input_text, tools=TOOLS, tool_choice=tool_choice
    )
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls
    assert calls[0].name == "get_weather"
    assert "city" in json.loads(calls[0].arguments)


class Weather(pydantic.BaseModel):
    city: str
    degrees: int


def test_json_schema_output_parses(client: openai.OpenAI, router: Router) -> None:
    parsed = client.responses.parse(model=MODEL, input="Weather as JSON", text_format=Weather)
    assert isinstance(parsed.output_parsed, Weather)
    assert router.sims[0].constraints[-1][0] == "json_schema"
    assert parsed.text is not None
    assert parsed.text.format is not None
    assert parsed.text.format.type == "json_schema"
    with client.responses.stream(
        model=MODEL, input="Weather as JSON", text_format=Weather
    ) as stream:
        final = stream.get_final_response()
    assert isinstance(final.output_parsed, Weather)


def test_max_output_tokens_ends_an_incomplete_response(
    client: openai.OpenAI, router: Router
) -> None:
    response = client.responses.create(model=MODEL, input="a long story", max_output_tokens=5)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None
    assert response.usage.output_tokens == 5
    events = raw_stream(router, {"input": "a long story", "max_output_tokens": 5})
    assert events[-1]["type"] == "response.incomplete"
    assert fold_events(events)["output"][0]["status"] == "incomplete"


def test_logprobs_come_with_the_output_text(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="Hello logprobs",
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    part = response.output[0].content[0]
    assert part.type == "output_text"
    assert part.logprobs
    # (The last token is the end of turn, as in chat logprobs.)
    assert "".join(lp.token for lp in part.logprobs).startswith("Hello logprobs")
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)


def test_stored_responses_are_retrieved_listed_and_deleted(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="first turn", metadata={"k": "v"})
    second = client.responses.create(
        model=MODEL, input="second turn", previous_response_id=first.id
    )
    assert client.responses.retrieve(second.id).model_dump() == second.model_dump()
    assert second.metadata == {"k": "v"} or first.metadata == {"k": "v"}
    items = list(client.responses.input_items.list(second.id))
    # Newest first: this turn's input, the first response's output, its input.
    assert [item.type for item in items] == ["message", "message", "message"]
    assert [getattr(item, "role", None) for item in items] == ["user", "assistant", "user"]
    assert items[1].id == first.output[0].id
    page = client.responses.input_items.list(second.id, order="asc", limit=1)
    assert [item.id for item in page.data] == [items[-1].id]
    assert page.has_more
    after = client.responses.input_items.list(second.id, order="asc", after=items[-1].id)
    assert [item.id for item in after.data] == [items[1].id, items[0].id]
    client.responses.delete(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(second.id)
    # The first response outlives the one that followed it.
    assert client.responses.retrieve(first.id).output_text == "first turn"


def test_store_false_keeps_nothing_and_unknown_ids_are_404(
    client: openai.OpenAI, router: Router
) -> None:
    response = client.responses.create(model=MODEL, input="forget me", store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    reply = post(router, {"input": "x", "previous_response_id": response.id})
    assert reply.status_code == 404
    assert reply.json()["error"]["code"] == "previous_response_not_found"
    assert reply.json()["error"]["param"] == "previous_response_id"
    cancel = httpx.post(f"{router.base_url}/v1/responses/{response.id}/cancel", timeout=10)
    assert cancel.status_code == 404


def test_cancel_refuses_a_foreground_response(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="done already")
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(response.id)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}, "tools[0].type"),
        (
            {"tools": [{"type": "mcp", "server_label": "x", "connector_id": "connector_gmail"}]},
            "tools[0].connector_id",
        ),
        ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"background_options": {"completion_window": "2h"}}, "background_options"),
        ({"prompt_cache_options": {"mode": "explicit"}}, "prompt_cache_options"),
        ({"image": {"context_compression": "enabled"}}, "image"),
        ({"text": {"verbosity": "low"}}, "text.verbosity"),
    ],
)
def test_what_turnout_does_not_do_is_refused_naming_it(
    router: Router, fields: dict[str, Any], param: str
) -> None:
    reply = post(router, {"input": "hi", **fields})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["code"] == "unsupported_parameter"
    assert error["param"] == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"input": []}, "input"),
        ({"temperature": 3}, "temperature"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"tool_choice": {"type": "function", "name": "nope"}, "tools": TOOLS}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
    ],
)
def test_bad_requests_are_400s_naming_the_field(
    router: Router, fields: dict[str, Any], param: str
) -> None:
    reply = post(router, {"input": "hi", **fields})
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_responses_of_every_route_are_json_errors_for_unknown_ids(router: Router) -> None:
    base = f"{router.base_url}/v1/responses/resp_nope"
    for method, url in [
        ("GET", base),
        ("DELETE", base),
        ("GET", base + "/input_items"),
        ("POST", base + "/cancel"),
    ]:
        reply = httpx.request(method, url, timeout=10)
        assert reply.status_code == 404, (method, url)
        assert reply.json()["error"]["code"] == "response_not_found"


def test_tool_definitions_are_echoed_and_reach_the_template(
    client: openai.OpenAI, router: Router
) -> None:
    response = client.responses.create(model=MODEL, input="Say something", tools=TOOLS)
    assert [tool.name for tool in response.tools] == ["get_weather"]  # type: ignore[union-attr]
    assert "Weather for a city" in last_prompt(router)


def test_a_client_chains_by_sending_the_output_back_without_a_store(
    client: openai.OpenAI, router: Router
) -> None:
    """The agent loop without ``store``: the previous output items (reasoning, call), as the
    client got them, go back as input with the call's output."""
    question = {"role": "user", "content": "plan ahead, please"}
    first = client.responses.create(model=MODEL, input=[question], tools=TOOLS, store=False)
    reasoning, call = first.output
    assert reasoning.type == "reasoning"
    assert call.type == "function_call"
    echoed = [item.model_dump(exclude_none=True) for item in first.output]
    output = {
        "type": "function_call_output",
        "call_id": call.call_id,
        "output": "sunny, 21 degrees",
    }
    second = client.responses.create(
        model=MODEL, input=[question, *echoed, output], tools=TOOLS, store=False
    )
    assert second.output_text == "It is sunny in Paris."
    prompt = last_prompt(router)
    asked = prompt.index("plan ahead, please")
    assert asked < prompt.index("<tool_call>", asked) < prompt.index("sunny, 21 degrees")


def test_a_failure_mid_stream_is_a_typed_error_event_the_client_raises(
    client: openai.OpenAI, router: Router
) -> None:
    sim = router.sims[0]
    sim.knobs.update({"fail_after_tokens": 2, "tokens_per_chunk": 1})
    try:
        events = raw_stream(router, {"input": "Hello there, failing stream"})
        *before, error = events
        kinds = [event["type"] for event in before]
        assert kinds[:2] == ["response.created", "response.in_progress"]
        assert "response.output_text.delta" in kinds
        assert error["type"] == "error"
        assert error["sequence_number"] == len(before)
        assert error["code"]
        assert error["message"]
        check_event(error)
        with (
            pytest.raises(openai.APIError),
            client.responses.stream(model=MODEL, input="Hello there, failing again") as stream,
        ):
            for _ in stream:
                pass
        # Nothing was kept of the failed answer.
        (response_id,) = {event["response"]["id"] for event in before if "response" in event}
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response_id)
    finally:
        sim.knobs.update({"fail_after_tokens": None, "tokens_per_chunk": 1})
