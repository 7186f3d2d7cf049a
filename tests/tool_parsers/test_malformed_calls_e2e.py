"""Malformed and cut-off tool calls end to end: the official openai client → turnout → simulated
workers, streaming and not. A call whose arguments are broken is text, never a call; a call cut
off by ``max_tokens`` keeps its arguments as received and ends with ``finish_reason: length``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from turnout.demo_model import path as demo_path
from turnout.tokenizer import ModelTokenizer

from ..server.harness import MODEL, run_router

BROKEN = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\n</tool_call>'
GOOD = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
)
LONG = (
    "Let me check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris, the capital city of France"}}\n'
    "</tool_call>"
)
SCRIPT = {
    "rules": [
        {"match": "broken", "reply": BROKEN},
        {"match": "both", "reply": f"One.\n{GOOD}\n{BROKEN}"},
        {"match": "long", "reply": LONG},
    ]
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    script = tmp_path_factory.mktemp("sim") / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    with run_router(sim_kwargs={"script": Path(script)}, model={"tool_parser": "qwen"}) as router:
        yield openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def ask(client: openai.OpenAI, text: str, **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answer to ``text`` non-streaming and streaming, each as {content, calls, finish}."""
    messages: Any = [{"role": "user", "content": text}]
    reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, **extra)
    choice = reply.choices[0]
    once = {
        "content": choice.message.content,
        "calls": [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []],
        "finish": choice.finish_reason,
    }
    content: list[str] = []
    calls: dict[int, list[str]] = {}
    finish = None
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, stream=True, **extra
    )
    for chunk in stream:
        for c in chunk.choices:
            content.append(c.delta.content or "")
            for call in c.delta.tool_calls or []:
                assert call.function is not None
                entry = calls.setdefault(call.index, ["", ""])
                entry[0] += call.function.name or ""
                entry[1] += call.function.arguments or ""
            finish = c.finish_reason or finish
    streamed = {
        "content": "".join(content) or None,
        "calls": [tuple(calls[i]) for i in sorted(calls)],
        "finish": finish,
    }
    return once, streamed


def test_malformed_call_is_content_not_a_call(client: openai.OpenAI) -> None:
    once, streamed = ask(client, "broken call please")
    assert once == streamed
    assert once == {"content": BROKEN, "calls": [], "finish": "stop"}


def test_valid_call_stands_beside_a_malformed_one(client: openai.OpenAI) -> None:
    once, streamed = ask(client, "both calls please")
    assert once == streamed
    assert once["calls"] == [("get_weather", '{"city": "Paris", "days": 3}')]
    assert once["content"].startswith("One.")
    assert once["content"].endswith(BROKEN)
    assert once["finish"] == "tool_calls"


def test_call_cut_off_by_max_tokens_keeps_partial_arguments(client: openai.OpenAI) -> None:
    tokenizer = ModelTokenizer.from_dir(demo_path())
    ids = tokenizer.encode(LONG, add_special_tokens=False)
    # the first token count whose text ends inside the city string
    limit = next(n for n in range(len(ids)) if "Paris, the" in tokenizer.decode(ids[:n]))
    received = tokenizer.decode(ids[:limit])
    arguments = received[received.index('{"city"') :]
    once, streamed = ask(client, "long call please", max_tokens=limit)
    assert once == streamed
    assert once == {
        "content": "Let me check.",  # the whitespace before a call is dropped
        "calls": [("get_weather", arguments)],
        "finish": "length",
    }
