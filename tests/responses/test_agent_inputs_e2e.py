"""Inputs agent SDKs send to /v1/responses: ``item_reference`` items (the Vercel AI SDK with
``store`` on) and ``truncation: auto`` over a context longer than the model's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.server.harness import MODEL, Router, run_router

from .test_responses_e2e import RULES, TOOLS, last_prompt, raw_stream


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


def post(router: Router, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{router.base_url}/v1/responses", json={"model": MODEL, **body}, timeout=30)


def test_item_references_stand_for_the_kept_items(client: openai.OpenAI, router: Router) -> None:
    question = {"role": "user", "content": "plan ahead, please"}
    first = client.responses.create(model=MODEL, input=[question], tools=TOOLS)
    reasoning, call = first.output
    assert call.type == "function_call"
    second = client.responses.create(
        model=MODEL,
        input=[
            question,
            {"type": "item_reference", "id": reasoning.id},
            {"type": "item_reference", "id": call.id},
            {"type": "function_call_output", "call_id": call.call_id,
             "output": "sunny, 21 degrees"},
        ],
        tools=TOOLS,
    )  # fmt: skip
    assert second.output_text == "It is sunny in Paris."
    prompt = last_prompt(router)
    assert "A call is needed." in prompt
    asked = prompt.index("plan ahead, please")
    assert asked < prompt.index("<tool_call>", asked) < prompt.index("sunny, 21 degrees")
    listed = client.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in listed.data][1:3] == ["reasoning", "function_call"]
    # An input item of a kept response can be referred to as well.
    greeting = client.responses.create(model=MODEL, input="echo me back")
    (said,) = client.responses.input_items.list(greeting.id).data
    again = client.responses.create(model=MODEL, input=[{"type": "item_reference", "id": said.id}])
    assert again.output_text == "echo me back"


def test_an_unknown_reference_is_a_404_naming_it(router: Router) -> None:
    reply = post(router, {"input": [{"type": "item_reference", "id": "msg_nope"}]})
    assert reply.status_code == 404, reply.text
    error = reply.json()["error"]
    assert error["code"] == "item_not_found"
    assert error["param"] == "input[0].id"
    reply = post(router, {"input": [{"type": "item_reference"}]})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "input[0].id"


def test_truncation_auto_drops_the_oldest_items_until_the_prompt_fits(router: Router) -> None:
    long = "lorem ipsum dolor " * 250  # 2,250 tokens; the sim's context is 8,192
    context = [
        {"role": "user", "content": "FIRST " + long},
        {"role": "assistant", "content": "SECOND " + long},
        {"role": "user", "content": "THIRD " + long},
        {"role": "assistant", "content": "FOURTH " + long},
        {"role": "user", "content": "the last question"},
    ]
    refused = post(router, {"input": context, "instructions": "Be brief."})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    answered = post(router, {"input": context, "instructions": "Be brief.", "truncation": "auto"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["truncation"] == "auto"
    prompt = last_prompt(router)
    assert "FIRST" not in prompt
    assert "SECOND" in prompt
    assert "Be brief." in prompt
    assert "the last question" in prompt
    alone = post(router, {"input": long * 4, "truncation": "auto"})
    assert alone.status_code == 400
    assert alone.json()["error"]["code"] == "context_length_exceeded"


def test_sealed_reasoning_round_trips_without_a_store(
    client: openai.OpenAI, router: Router
) -> None:
    """A stateless loop: the reasoning comes back sealed (``encrypted_content``) and the
    client returns only that; the router opens it into the next prompt."""
    question = {"role": "user", "content": "plan ahead, please"}
    first = client.responses.create(
        model=MODEL, input=[question], tools=TOOLS, store=False,
        include=["reasoning.encrypted_content"],
    )  # fmt: skip
    reasoning, call = first.output
    sealed = reasoning.encrypted_content  # type: ignore[union-attr]
    assert sealed
    assert "A call is needed." not in sealed
    opaque = {"type": "reasoning", "id": reasoning.id, "summary": [], "encrypted_content": sealed}
    output = {
        "type": "function_call_output",
        "call_id": call.call_id,
        "output": "sunny, 21 degrees",
    }  # type: ignore[union-attr]
    echoed_call = call.model_dump(exclude_none=True)
    second = client.responses.create(
        model=MODEL, input=[question, opaque, echoed_call, output], tools=TOOLS, store=False
    )
    assert second.output_text == "It is sunny in Paris."
    assert "A call is needed." in last_prompt(router)
    forged = {**opaque, "encrypted_content": sealed[:-4] + "AAAA"}
    reply = post(router, {"input": [question, forged, echoed_call, output], "store": False})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "invalid_encrypted_content"
    assert error["param"] == "input[1].encrypted_content"


def test_sealed_reasoning_streams_in_the_item_done_event(router: Router) -> None:
    events = raw_stream(
        router,
        {"input": "ponder this", "store": False, "include": ["reasoning.encrypted_content"]},
    )
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert done[0]["type"] == "reasoning"
    assert done[0]["encrypted_content"]
