"""An agent's tool loop on every real chat template: user → assistant(tool_calls) → tool →
assistant, driven by the official openai client over HTTP against the router and a simulated
worker that answers in the model's own tool-call format.

The second turn is what agent frameworks send back: the assistant message as the client got it
(``content: null`` beside the calls, or no ``content`` at all) with the call's arguments as a
JSON string, then the tool's result.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import openai
import pytest
import yaml

from tests.tokenizer.helpers import TEMPLATES

from .harness import MODEL, Router, run_router
from .test_chat_e2e import collect

pytestmark = [
    pytest.mark.needs_shared,
    pytest.mark.skipif(
        not TEMPLATES.is_dir(), reason=f"shared chat template fixtures not found at {TEMPLATES}"
    ),
]

ARGS = {"city": "Zürich", "date": "2031-05-07"}
ARGS_JSON = json.dumps(ARGS, ensure_ascii=False)
QUESTION = "What will the weather be in Zürich on 7 May 2031?"
TOOL_RESULT = "sunny, 21 degrees"
FINAL = "It will be sunny and 21 degrees in Zürich."
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather forecast for a city on a date",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "date": {"type": "string"}},
                "required": ["city", "date"],
            },
        },
    }
]

QWEN_CALL = '<tool_call>\n{"name": "get_weather", "arguments": ' + ARGS_JSON + "}\n</tool_call>"


@dataclass(frozen=True)
class Model:
    """How one model family calls tools: its parsers and a first answer in its format."""

    tool_parser: str
    first_answer: str
    reasoning_parser: str | None = None
    #: The template shows earlier calls to the model (Qwen2-VL's does not).
    renders_calls: bool = True
    #: The answer after the tool's result (models that always think end their reasoning first).
    final_answer: str = FINAL
    #: The first answer's content: null when only whitespace surrounds the call.
    first_content: str | None = None


MODELS: dict[str, Model] = {
    "ByteDance-Seed-OSS": Model(
        "seed_oss",
        "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Zürich</parameter>\n"
        "<parameter=date>2031-05-07</parameter>\n</function>\n</seed:tool_call>",
    ),
    "Mistral-Small-3.2-24B-Instruct-2506": Model(
        "mistral", "[TOOL_CALLS]get_weather[ARGS]" + ARGS_JSON
    ),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": Model("qwen", QWEN_CALL),
    "Qwen-Qwen2-VL-7B-Instruct": Model("qwen", QWEN_CALL, renders_calls=False),
    "Qwen-Qwen2.5-7B-Instruct": Model(
        "qwen",
        "I will look that up for you.\n" + QWEN_CALL,
        first_content="I will look that up for you.",
    ),
    "Qwen-Qwen3-0.6B": Model(
        "qwen", "<think>The user wants a forecast.</think>\n\n" + QWEN_CALL, "qwen3"
    ),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": Model(
        "deepseek_v3",
        "A forecast is needed.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function"
        "<｜tool▁sep｜>get_weather\n```json\n" + ARGS_JSON + "\n```<｜tool▁call▁end｜>"
        "<｜tool▁calls▁end｜>",
        "deepseek_r1",
        final_answer="The tool answered.</think>" + FINAL,
    ),
    "deepseek-ai-DeepSeek-V3.1": Model(
        "deepseek_v31",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        + ARGS_JSON
        + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    ),
    "meta-llama-Llama-3.1-8B-Instruct": Model(
        "llama", '{"name": "get_weather", "parameters": ' + ARGS_JSON + "}"
    ),
    "moonshotai-Kimi-K2": Model(
        "kimi_k2",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        "<|tool_call_argument_begin|>" + ARGS_JSON + "<|tool_call_end|><|tool_calls_section_end|>",
    ),
    "openai-gpt-oss-120b": Model(
        "gpt_oss",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        + ARGS_JSON
        + "<|call|>",
    ),
}


def _template_names() -> list[str]:
    if not TEMPLATES.is_dir():
        return []
    return sorted(path.stem for path in TEMPLATES.glob("*.jinja"))


def test_every_fixture_template_has_a_model() -> None:
    assert set(_template_names()) <= set(MODELS)


@pytest.fixture(scope="module", params=_template_names())
def family(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture(scope="module")
def router(family: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    model = MODELS[family]
    script = tmp_path_factory.mktemp("sim") / "script.yaml"
    rules = [
        {"match": TOOL_RESULT, "reply": model.final_answer, "match_on": "prompt"},
        {"match": "weather be in Zürich", "reply": model.first_answer, "match_on": "prompt"},
    ]
    script.write_text(yaml.safe_dump({"rules": rules}, allow_unicode=True), encoding="utf-8")
    settings: dict[str, Any] = {
        "chat_template": str(TEMPLATES / f"{family}.jinja"),
        "tool_parser": model.tool_parser,
        "reasoning_parser": model.reasoning_parser or "none",
    }
    with run_router(sims=1, sim_kwargs={"script": script}, model=settings) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def _last_prompt(router: Router) -> str:
    text: str = router.sims[0].requests[-1].tokenized.original_text
    return text


@pytest.mark.parametrize("assistant_content", ["null", "absent"])
def test_tool_loop(
    family: str, client: openai.OpenAI, router: Router, assistant_content: str
) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == MODELS[family].first_content
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == ARGS

    streamed = collect(
        client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, stream=True)
    )
    assert streamed["finish"] == {0: "tool_calls"}
    assert streamed["content"] == (MODELS[family].first_content or "")
    assert [json.loads(c["arguments"]) for c in streamed["calls"].values()] == [ARGS]

    # What agent frameworks send back: the message as received, arguments as JSON text.
    assistant = choice.message.model_dump(exclude_none=True)
    assistant["content"] = None
    if assistant_content == "absent":
        del assistant["content"]
    history += [
        assistant,
        {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT},
    ]
    second = client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS)
    assert second.choices[0].message.content == FINAL
    assert second.choices[0].finish_reason == "stop"
    prompt = _last_prompt(router)
    assert TOOL_RESULT in prompt
    if MODELS[family].renders_calls:
        assert "2031-05-07" in prompt, "the earlier call is shown to the model"

    folded = collect(
        client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, stream=True)
    )
    assert folded["content"] == FINAL
