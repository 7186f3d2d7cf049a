"""gpt-oss through the ``harmony`` chat format, end to end: the official client asks a model
configured with ``chat_format: harmony``; the prompt the simulated worker receives was rendered
by openai-harmony (tools in the developer message, the reasoning effort in the system message),
and the worker's harmony tokens come back as reasoning_content, tool_calls and content, streamed
or not, alike. The worker simulates a gpt-oss model directory whose tokenizer is harmony's own
vocabulary (:mod:`tests.harmony.gpt_oss_model`); nothing needs the network."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from turnout.plugins.harmony import load_gpt_oss_encoding
from turnout.sim.model import Script

from ..server.harness import MODEL, Router, run_router
from .gpt_oss_model import write_gpt_oss_model
from .samples import ANSWER, CALL, WEATHER

SCRIPT = Script.from_data(
    {
        "rules": [
            # the tool's answer is in the prompt: the final answer
            {"match": "functions.get_weather to=assistant", "reply": ANSWER, "match_on": "prompt"},
            {"match": "weather", "reply": CALL, "match_on": "prompt"},
        ],
        "default": "<|channel|>final<|message|>Hello!<|return|>",
    }
)
ASK = [{"role": "user", "content": "What is the weather in Zürich?"}]


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    vocab = tmp_path_factory.mktemp("vocab")
    model_dir = write_gpt_oss_model(tmp_path_factory.mktemp("gpt-oss"), vocab)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TURNOUT_CACHE_DIR", str(vocab.parent / "cache"))
        patch.setenv("TIKTOKEN_ENCODINGS_BASE", str(vocab))
        with run_router(
            sims=1,
            sim_kwargs={"script": SCRIPT},
            model={"chat_format": "harmony"},
            model_dir=model_dir,
        ) as running:
            yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)


def _prompt_of(router: Router, request_id: str) -> str:
    [request] = [r for r in router.sims[0].requests if r.request_id.startswith(request_id)]
    return str(load_gpt_oss_encoding().decode(list(request.tokenized.input_ids)))


def _folded_stream(stream: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}, "finish": None}
    out["named"] = {}  # call index: how many chunks gave it a name (and an id): one each
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            out["content"] += delta.content or ""
            out["reasoning"] += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or []:
                entry = out["calls"].setdefault(call.index, {"name": "", "arguments": ""})
                if call.function and call.function.name:
                    entry["name"] = call.function.name
                    out["named"][call.index] = out["named"].get(call.index, 0) + 1
                    assert call.id
                entry["arguments"] += (call.function.arguments if call.function else None) or ""
            out["finish"] = choice.finish_reason or out["finish"]
    return out


def test_a_tool_call_one_shot(router: Router, client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER], reasoning_effort="high"
    )
    [choice] = answer.choices
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Zürich"}
    assert call.id.startswith("call_")
    assert (choice.message.model_extra or {})["reasoning_content"] == (
        "The user wants the weather; call the tool."
    )
    assert not choice.message.content
    prompt = _prompt_of(router, answer.id)
    assert "Reasoning: high" in prompt  # reasoning_effort, in harmony's system message
    assert "namespace functions" in prompt  # the tools, in the developer message
    assert "type get_weather" in prompt
    assert prompt.endswith("<|start|>assistant")


def test_a_tool_call_streamed_is_the_same(router: Router, client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=ASK, tools=[WEATHER], stream=True)
    folded = _folded_stream(stream)
    assert folded["finish"] == "tool_calls"
    assert folded["calls"] == {0: {"name": "get_weather", "arguments": '{"city": "Zürich"}'}}
    assert folded["named"] == {0: 1}
    assert folded["reasoning"] == "The user wants the weather; call the tool."
    assert folded["content"] == ""


@pytest.mark.parametrize("stream", [False, True])
def test_the_tool_result_gives_the_final_answer(
    router: Router, client: openai.OpenAI, stream: bool
) -> None:
    messages: list[Any] = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Zürich"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"celsius": 21, "sky": "sunny"}'},
    ]
    kwargs: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": [WEATHER]}
    if stream:
        folded = _folded_stream(client.chat.completions.create(stream=True, **kwargs))
        content, reasoning, finish = folded["content"], folded["reasoning"], folded["finish"]
        assert folded["calls"] == {}
    else:
        [choice] = client.chat.completions.create(**kwargs).choices
        content, finish = choice.message.content, choice.finish_reason
        reasoning = (choice.message.model_extra or {})["reasoning_content"]
        assert not choice.message.tool_calls
    assert content == "It is 21 °C and sunny in Zürich. ☀️"
    assert reasoning == "21 degrees, sunny."
    assert finish == "stop"


def test_what_harmony_cannot_honour_is_a_400(client: openai.OpenAI) -> None:
    for extra in (
        {"stop": ["\n"]},
        {"tool_choice": "required", "tools": [WEATHER]},
        {"response_format": {"type": "json_object"}},
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=MODEL, messages=ASK, **extra)
        assert caught.value.code == "unsupported_parameter"
        assert "harmony" in caught.value.message
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=ASK, reasoning_effort="extreme")
    assert caught.value.status_code == 400
