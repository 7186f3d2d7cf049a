"""Reasoning families end to end: the official openai client → turnout → a simulated worker
that answers with scripted model output, streamed and not."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from turnout.sim import Script

from ..server.harness import MODEL, Router, run_router

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
SCRIPT = Script.from_data(
    [
        {"match": "late start", "reply": "Sure. <think>Six times seven.</think>It is 42."},
        {"match": "call inside", "reply": "<think>I need the weather.\n" + CALL},
        {"match": "lone end", "reply": "The prompt opened it.</think>Sunny."},
        {"match": "magistral", "reply": "[THINK]Six times seven.[/THINK]It is 42."},
    ]
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


# (parser, prompt, content, reasoning): what each family makes of a scripted output. The demo
# chat template ends the prompt with "<|im_start|>assistant\n", so no family is told that the
# output starts in reasoning: the family default decides.
CASES = [
    ("qwen3", "late start", "Sure. It is 42.", "Six times seven."),
    ("qwen3", "lone end", "The prompt opened it.</think>Sunny.", ""),
    # GLM starts outside reasoning, like SGLang's and smg's parsers: the prompt decides.
    ("glm45", "lone end", "The prompt opened it.</think>Sunny.", ""),
    ("glm45", "late start", "Sure. It is 42.", "Six times seven."),
    ("mistral", "magistral", "It is 42.", "Six times seven."),
    ("mistral", "late start", "Sure. <think>Six times seven.</think>It is 42.", ""),
]


@pytest.fixture(scope="module")
def routers() -> Iterator[Callable[[str], Router]]:
    """Routers by reasoning parser (with the qwen tool parser), each started on first use."""
    with contextlib.ExitStack() as stack:
        started: dict[str, Router] = {}

        def router(parser: str) -> Router:
            if parser not in started:
                started[parser] = stack.enter_context(
                    run_router(
                        sims=1,
                        sim_kwargs={"script": SCRIPT},
                        model={"tool_parser": "qwen", "reasoning_parser": parser},
                    )
                )
            return started[parser]

        yield router


def ask(router: Router, text: str, **extra: Any) -> list[dict[str, Any]]:
    """The answer to ``text`` in both modes: ``[non-streaming, streaming folded]``."""
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)
    messages: Any = [{"role": "user", "content": text}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, **extra)
    message = reply.choices[0].message
    whole = {
        "content": message.content or "",
        "reasoning": (message.model_extra or {}).get("reasoning_content") or "",
        "calls": [
            (call.function.name, json.loads(call.function.arguments))
            for call in message.tool_calls or []
        ],
    }
    content, reasoning = [], []
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for chunk in client.chat.completions.create(
        model=MODEL, messages=messages, stream=True, **extra
    ):
        for choice in chunk.choices:
            delta = choice.delta
            content.append(delta.content or "")
            reasoning.append((delta.model_extra or {}).get("reasoning_content") or "")
            for call in delta.tool_calls or []:
                if call.function and call.function.name:
                    names[call.index] = call.function.name
                if call.function and call.function.arguments:
                    arguments[call.index] = arguments.get(call.index, "") + call.function.arguments
    streamed = {
        "content": "".join(content),
        "reasoning": "".join(reasoning),
        "calls": [(names[i], json.loads(arguments[i])) for i in sorted(names)],
    }
    return [whole, streamed]


@pytest.mark.parametrize(("parser", "prompt", "content", "reasoning"), CASES)
def test_families_split_scripted_outputs_the_same_in_both_modes(
    routers: Callable[[str], Router], parser: str, prompt: str, content: str, reasoning: str
) -> None:
    expected = {"content": content, "reasoning": reasoning, "calls": []}
    assert ask(routers(parser), prompt) == [expected, expected]


@pytest.mark.parametrize("parser", ["qwen3", "glm45"])
def test_tool_call_inside_unterminated_reasoning_is_a_call(
    routers: Callable[[str], Router], parser: str
) -> None:
    expected = {
        "content": "",
        "reasoning": "I need the weather.\n",
        "calls": [("get_weather", {"city": "Paris"})],
    }
    assert ask(routers(parser), "call inside", tools=TOOLS) == [expected, expected]


@pytest.mark.parametrize(
    ("parser", "text", "reasoning", "normal"),
    [
        ("glm45", "plain answer", "", "plain answer"),
        ("kimi_k2", "opened by the prompt</think>answer", "opened by the prompt", "answer"),
        ("qwen3_thinking", "opened by the prompt</think>answer", "opened by the prompt", "answer"),
        ("minimax", "opened by the prompt</think>answer", "opened by the prompt", "answer"),
        ("qwen3", "normal text <think>reasoning", "reasoning", "normal text "),
    ],
)
def test_parse_reasoning_endpoint_uses_the_parser_on_its_own(
    routers: Callable[[str], Router], parser: str, text: str, reasoning: str, normal: str
) -> None:
    answer = httpx.post(
        f"{routers('qwen3').base_url}/parse/reasoning",
        json={"parser": parser, "text": text},
        timeout=10,
    )
    assert answer.status_code == 200
    assert answer.json() == {"reasoning_text": reasoning, "normal_text": normal}


def test_prompt_that_opens_reasoning_makes_glm_start_in_it(
    routers: Callable[[str], Router],
) -> None:
    """A prompt ending with ``<think>`` (as GLM-4.7/5 templates leave it) puts the output in
    reasoning: a lone ``</think>`` ends it."""
    client = openai.OpenAI(
        base_url=f"{routers('glm45').base_url}/v1", api_key="unused", max_retries=0
    )
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "user", "content": "lone end"},
            {"role": "assistant", "content": "<think>"},
        ],
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    message = reply.choices[0].message
    assert message.content == "Sunny."
    assert (message.model_extra or {}).get("reasoning_content") == "The prompt opened it."


def test_prompt_that_closed_reasoning_makes_the_output_normal_text(
    routers: Callable[[str], Router],
) -> None:
    """An assistant turn the client ends with ``</think>`` (continued, as a template with
    thinking off would leave it): GLM's output then starts outside reasoning."""
    client = openai.OpenAI(
        base_url=f"{routers('glm45').base_url}/v1", api_key="unused", max_retries=0
    )
    reply = client.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "user", "content": "lone end"},
            {"role": "assistant", "content": "<think></think>"},
        ],
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    message = reply.choices[0].message
    assert message.content == "The prompt opened it.</think>Sunny."
    assert not (message.model_extra or {}).get("reasoning_content")
