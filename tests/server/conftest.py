"""A router with two simulated workers, shared by the end-to-end tests of a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from .harness import MODEL, Router, run_router

TOOL_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
)
SCRIPT = {
    "rules": [
        {"match": "weather", "reply": "Let me check.\n" + TOOL_CALL},
        {"match": "plan ahead", "reply": "<think>A call is needed.</think>\n\n" + TOOL_CALL},
        {
            "match": "both cities",
            "reply": TOOL_CALL + "\n" + TOOL_CALL.replace('"Paris", "days": 3', '"Tokyo"'),
        },
        {"match": "ponder", "reply": "<think>Six times seven.</think>The answer is 42."},
        {"match": "stopper", "reply": "alpha beta STOP gamma delta"},
        {"match": "brace", "reply": "{not a call, just braces}"},
        {"match": "json answer please", "reply": '{"answer": "forty-two"}'},
        {"match": "long story", "reply": "once upon a time " * 40},
    ]
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.fixture(scope="package")
def script_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "script.yaml"
    path.write_text(yaml.safe_dump(SCRIPT))
    return path


@pytest.fixture(scope="package")
def router(script_file: Path) -> Iterator[Router]:
    with run_router(
        sim_kwargs={"script": script_file},
        model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
        config={"defaults": {"policy": "round_robin"}},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def document(router: Router) -> dict[str, Any]:
    """The served OpenAPI document (of the module's router)."""
    answer = httpx.get(f"{router.base_url}/openapi.json", timeout=30)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


@pytest.fixture(scope="module")
def http(router: Router) -> Iterator[httpx.Client]:
    """A plain HTTP client of the module's router."""
    with httpx.Client(base_url=router.base_url, timeout=60) as client:
        yield client


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


__all__ = ["MODEL", "TOOLS"]
