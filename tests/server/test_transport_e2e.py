"""The ``wire.transport`` setting: the grpc.aio fallback serves the same answers as the native
HTTP/2 client (the default, used by every other end-to-end test)."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from turnout.wire.native import NativeChannel

from .conftest import MODEL, TOOLS
from .harness import Router, run_router


def answers(router: Router) -> list[object]:
    """One plain, one streamed-with-tools and one n=2 chat completion, reduced to what a user
    sees."""
    client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)
    plain = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "ponder this"}], seed=1
    )
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "weather in Paris"}],
        tools=TOOLS,  # type: ignore[arg-type]
        stream=True,
    )
    content, calls = "", []
    for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            content += delta.content or ""
            calls += [(c.function.name, c.function.arguments) for c in delta.tool_calls or []]
    several = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "echo me"}], n=2
    )
    return [
        plain.choices[0].message.content,
        getattr(plain.choices[0].message, "reasoning_content", None),
        content,
        calls,
        [c.message.content for c in several.choices],
        several.usage.completion_tokens if several.usage else None,
    ]


def test_grpcio_transport_gives_the_same_answers(
    router: Router, script_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = answers(router)
    assert expected[0] == "The answer is 42."
    assert expected[1] == "Six times seven."
    assert expected[3] == [("get_weather", '{"city": "Paris", "days": 3}')]  # released whole

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the native transport was used")

    with run_router(
        sim_kwargs={"script": script_file},
        model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
        config={"wire": {"transport": "grpcio"}},
    ) as fallback:
        monkeypatch.setattr(NativeChannel, "call", refuse)
        assert answers(fallback) == expected
