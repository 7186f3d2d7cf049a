"""The installed plugin inside a real router, in front of simulated workers (turnout_router)."""

from typing import Any

import pytest

from turnout.testing.router import MODEL, RunningRouter

CALL = '[call]{"name": "get_weather", "arguments": {"city": "Paris"}}[/call]'
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


@pytest.fixture
def turnout_config() -> dict[str, Any]:
    # A policy by name with its parameters (none here: the least loaded worker). Loads count
    # only this router's requests (not what the workers report a moment late), so ties are
    # exact and the test is deterministic.
    return {
        "defaults": {"policy": {"name": "pinned", "params": {}}},
        "load_monitor": {"enabled": False},
    }


@pytest.fixture
def turnout_model() -> dict[str, Any]:
    return {"tool_parser": "bracket_calls"}


@pytest.fixture
def turnout_sim_script() -> dict[str, Any]:
    return {"rules": [{"match": "weather", "reply": "Let me look.\n" + CALL}]}


@pytest.fixture
def turnout_sims() -> int:
    return 2


def chat(router: RunningRouter, text: str) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "tools": TOOLS}
    status, answer = router.request_json("POST", "/v1/chat/completions", body)
    assert status == 200, answer
    return answer


def test_the_parser_turns_the_models_calls_into_tool_calls(turnout_router: RunningRouter) -> None:
    choice = chat(turnout_router, "weather in Paris?")["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"].strip() == "Let me look."
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}


def test_the_policy_picks_the_worker(turnout_router: RunningRouter) -> None:
    for _ in range(4):
        chat(turnout_router, "hello")
    # One request at a time: the workers tie on load and the first by id takes them all.
    assert sorted(len(sim.requests) for sim in turnout_router.sims) == [0, 4]
