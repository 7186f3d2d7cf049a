"""Failover: a worker that fails after the first token hands the rest of the answer to another
worker, and the client gets the answer it would have had from one worker (context-answer sims:
a continuation elsewhere is token for token what the first sim would have said)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import yaml

from turnout.sim import SimProcess, get_counters

from .conftest import TOOL_CALL, TOOLS
from .harness import MODEL, Router, run_router

#: Scripted answers (continued on another sim from wherever they were cut); any other prompt
#: gets a context answer.
SCRIPT = {
    "rules": [
        {"match": "plan ahead", "reply": "<think>A call is needed here.</think>\n\n" + TOOL_CALL},
        {"match": "two ways", "reply": ["the first way to say it", "a second way of saying it"]},
    ]
}


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    script = tmp_path_factory.mktemp("migration") / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    with run_router(
        config={"defaults": {"policy": "round_robin"}},
        sims=3,
        sim_kwargs={"context_answers": True, "script": script},
        model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
    ) as running:
        yield running


@pytest.fixture(autouse=True)
def healthy_workers(router: Router) -> Iterator[None]:
    yield
    for sim in router.sims:
        sim.knobs.update(
            {"fail_after_tokens": None, "fail_after_status": "INTERNAL", "fault_budget": None}
        )


def body(stream: bool, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "tell me a long story"}],
        "max_tokens": 40,
        "stream": stream,
        "logprobs": True,
        "top_logprobs": 2,
        **extra,
    }


def streamed(router: Router, request: dict[str, Any]) -> tuple[str, list[Any], list[str], Any]:
    """Content, logprobs, finish reasons and usage of a streamed answer (no error event)."""
    request = {**request, "stream_options": {"include_usage": True}}
    url = f"{router.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=request, timeout=30) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert not any("error" in c for c in chunks), chunks[-1]
    content, logprobs, reasons, usage = "", [], [], None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            content += choice["delta"].get("content") or ""
            logprobs += (choice.get("logprobs") or {}).get("content") or []
            if choice.get("finish_reason"):
                reasons.append(choice["finish_reason"])
    return content, logprobs, reasons, usage


def fail_everywhere_once(router: Router, after: int, status: str = "UNAVAILABLE") -> None:
    """Each sim fails the next request it serves after ``after`` tokens."""
    for sim in router.sims:
        sim.knobs.update(
            {"fail_after_tokens": after, "fail_after_status": status, "fault_budget": 1}
        )


def counted(router: Router, before: dict[str, float], key: str, expected: float) -> None:
    """Wait until ``key`` of ``turnout_migrations_total`` grew by ``expected`` since ``before``
    (a request is counted as it ends, just after the client read its end)."""
    router.wait_until(
        lambda: migrations(router).get(key, 0) - before.get(key, 0) == expected, timeout=10
    )


def migrations(router: Router) -> dict[str, float]:
    text = httpx.get(f"{router.base_url}/metrics", timeout=10).text
    counts = {}
    for line in text.splitlines():
        if line.startswith("turnout_migrations_total{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels[len("turnout_migrations_total") :]] = float(value)
    return counts


def test_a_stream_goes_on_on_another_worker_token_for_token(router: Router) -> None:
    reference = streamed(router, body(True))
    assert reference[2] == ["length"]
    assert reference[3]["completion_tokens"] == 40
    # Two of the three sims fail the next request they serve after 5 tokens: an answer may
    # move twice (the default limit), from one failing worker to the other, then on.
    fail_everywhere_once(router, 5)
    router.sims[2].knobs.update({"fault_budget": 0})
    before = migrations(router)
    for _ in range(3):
        assert streamed(router, body(True)) == reference
    counted(router, before, '{outcome="migrated",reason="unavailable"}', 2)
    for sim in router.sims[:2]:
        assert "error" in sim.records.outcomes.values()


def test_an_internal_error_mid_answer_without_streaming_moves_the_answer(router: Router) -> None:
    # A stop string makes the worker stream (turnout watches for it): 16 tokens a message.
    request = body(False, stop=["never said"])
    url = f"{router.base_url}/v1/chat/completions"
    reference = httpx.post(url, json=request, timeout=30).json()
    fail_everywhere_once(router, 20, status="INTERNAL")
    for sim in router.sims[1:]:
        sim.knobs.update({"fault_budget": 0})
    answers = [httpx.post(url, json=request, timeout=30) for _ in range(3)]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        got = answer.json()
        assert got["choices"] == reference["choices"]
        assert got["usage"] == reference["usage"]


def test_a_constrained_stream_is_not_moved_and_ends_with_the_error_event(router: Router) -> None:
    schema = {"type": "object", "properties": {"story": {"type": "string"}}}
    request = {
        **body(True),
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }
    fail_everywhere_once(router, 2)
    before = migrations(router)
    url = f"{router.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=request, timeout=30) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    assert "error" in json.loads(lines[-2])
    counted(router, before, '{outcome="refused",reason="unavailable"}', 1)


def test_an_answer_of_several_choices_goes_on_choice_by_choice(router: Router) -> None:
    """Each choice of n=2 continues from its own context: the same two answers, one usage."""
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "say it two ways"}],
        "max_tokens": 50,
        "n": 2,
        "logprobs": True,
    }
    reference = streamed_message(router, request)
    texts = {choice["content"] for choice in reference["choices"].values()}
    assert texts == {"the first way to say it", "a second way of saying it"}
    url = f"{router.base_url}/v1/chat/completions"
    one_shot = httpx.post(url, json={**request, "stop": ["never said"]}, timeout=30).json()
    before = migrations(router)
    fail_everywhere_once(router, 3)
    router.sims[2].knobs.update({"fault_budget": 0})
    assert streamed_message(router, request) == reference
    fail_everywhere_once(router, 3)
    router.sims[2].knobs.update({"fault_budget": 0})
    moved = httpx.post(url, json={**request, "stop": ["never said"]}, timeout=30)
    assert moved.status_code == 200, moved.text
    assert without_call_ids(moved.json()) == without_call_ids(one_shot)
    key = '{outcome="migrated",reason="unavailable"}'
    router.wait_until(lambda: migrations(router).get(key, 0) >= before.get(key, 0) + 2, timeout=10)


def streamed_message(router: Router, request: dict[str, Any]) -> dict[str, Any]:
    """A streamed chat answer put together: per choice its reasoning, content, tool calls and
    finish reason, and the usage (no error event)."""
    request = {**request, "stream": True, "stream_options": {"include_usage": True}}
    url = f"{router.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=request, timeout=30) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert not any("error" in c for c in chunks), chunks[-1]
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            got = choices.setdefault(
                choice["index"], {"reasoning": "", "content": "", "calls": {}, "finish": []}
            )
            delta = choice["delta"]
            got["reasoning"] += delta.get("reasoning_content") or ""
            got["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                known = got["calls"].setdefault(call["index"], {"name": "", "arguments": ""})
                known["name"] += call.get("function", {}).get("name") or ""
                known["arguments"] += call.get("function", {}).get("arguments") or ""
            if choice.get("finish_reason"):
                got["finish"].append(choice["finish_reason"])
    return {"choices": choices, "usage": usage}


@pytest.mark.parametrize("after", [4, 14])
def test_reasoning_and_a_tool_call_read_on_across_a_move(router: Router, after: int) -> None:
    """Cut in the reasoning (4 tokens) or in the tool call (14): the parsers' state is the
    router's, so the answer is the one a single worker gives."""
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "plan ahead for the trip"}],
        "tools": TOOLS,
        "max_tokens": 100,
    }
    reference = streamed_message(router, request)
    (choice,) = reference["choices"].values()
    assert choice["reasoning"] == "A call is needed here."
    assert choice["calls"][0]["name"] == "get_weather"
    assert choice["finish"] == ["tool_calls"]
    url = f"{router.base_url}/v1/chat/completions"
    one_shot = without_call_ids(httpx.post(url, json=request, timeout=30).json())
    before = migrations(router)
    fail_everywhere_once(router, after)
    router.sims[2].knobs.update({"fault_budget": 0})
    assert streamed_message(router, request) == reference
    fail_everywhere_once(router, after)
    router.sims[2].knobs.update({"fault_budget": 0})
    # A one-shot answer the worker does not stream starts over elsewhere (nothing was shown).
    moved = httpx.post(url, json=request, timeout=30)
    assert moved.status_code == 200, moved.text
    assert without_call_ids(moved.json()) == one_shot
    key = '{outcome="migrated",reason="unavailable"}'
    router.wait_until(lambda: migrations(router).get(key, 0) > before.get(key, 0), timeout=10)


def without_call_ids(answer: dict[str, Any]) -> dict[str, Any]:
    """The choices and token counts of a one-shot answer, its tool calls' ids (random) and
    cached tokens (each sim's cache) left out."""
    for choice in answer["choices"]:
        for call in choice["message"].get("tool_calls") or []:
            del call["id"]
    answer["usage"].pop("prompt_tokens_details", None)
    return {"choices": answer["choices"], "usage": answer["usage"]}


@pytest.mark.slow
def test_kill_9_of_one_of_three_workers_under_24_streams_cuts_none() -> None:
    """Three ``turnout sim`` processes (paced context answers), 24 streaming clients; one sim
    is killed with SIGKILL while every stream runs: each answer is the unfailed one."""
    args = ("--served-model-name", MODEL, "--context-answers", "--delay-ms", "20")
    with contextlib.ExitStack() as stack:
        sims = [stack.enter_context(SimProcess(*args)) for _ in range(3)]
        config = {
            "defaults": {"policy": "round_robin"},
            "workers": [{"url": sim.url, "model": MODEL} for sim in sims],
        }
        running = stack.enter_context(run_router(config=config, sims=0))
        prompts = [f"story number {i}" for i in range(24)]

        def ask(i: int) -> tuple[str, list[Any], list[str], Any]:
            request = body(True, max_tokens=300)
            request["messages"] = [{"role": "user", "content": prompts[i]}]
            return streamed(running, request)

        with ThreadPoolExecutor(24) as pool:
            references = list(pool.map(ask, range(24)))
            answers = [pool.submit(ask, i) for i in range(24)]
            running_on = wait_until_streaming(sims, 24)
            victim = sims[0].proc
            assert victim is not None
            os.killpg(os.getpgid(victim.pid), signal.SIGKILL)
            results = [future.result(timeout=60) for future in answers]
        assert results == references  # no stream cut, token for token, usage exact
        assert running_on[0] > 0
        key = '{outcome="migrated",reason="unavailable"}'
        counted(running, {}, key, running_on[0])
        assert set(migrations(running)) == {key}


def wait_until_streaming(sims: list[SimProcess], streams: int) -> list[int]:
    """Wait until ``streams`` requests run on ``sims`` (then each has a token or more); the
    running requests of each."""
    deadline = time.monotonic() + 30
    while True:
        running = [asyncio.run(get_counters(sim.url))["running"] for sim in sims]
        if sum(running) >= streams:
            time.sleep(0.2)  # their first tokens are out
            return running
        assert time.monotonic() < deadline, running
        time.sleep(0.05)


def test_a_stop_string_past_the_move_ends_the_answer_as_without_it(router: Router) -> None:
    words = streamed(router, body(True))[0].split()
    # The first pair of words that the answer has not said before, well past the failure.
    at = next(i for i in range(10, len(words) - 1) if f"{words[i]} {words[i + 1]}" not in
              " ".join(words[: i + 1]))  # fmt: skip
    request = body(True, stop=[f"{words[at]} {words[at + 1]}"])
    reference = streamed(router, request)
    assert reference[2] == ["stop"]
    fail_everywhere_once(router, 5)
    for sim in router.sims[1:]:
        sim.knobs.update({"fault_budget": 0})
    for _ in range(3):
        assert streamed(router, request) == reference


def test_a_completions_stream_moves_too(router: Router) -> None:
    request = {"model": MODEL, "prompt": "once upon a time", "max_tokens": 30, "stream": True}
    url = f"{router.base_url}/v1/completions"

    def text() -> tuple[str, Any]:
        with httpx.stream("POST", url, json=request, timeout=30) as response:
            lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
        chunks = [json.loads(line) for line in lines[:-1]]
        assert not any("error" in c for c in chunks), chunks[-1]
        # How tokens group into chunks depends on timing; the text and the one finish do not.
        reasons = [c["finish_reason"] for chunk in chunks for c in chunk["choices"]]
        return "".join(c["text"] for chunk in chunks for c in chunk["choices"]), [
            r for r in reasons if r is not None
        ]

    reference = text()
    fail_everywhere_once(router, 4, status="INTERNAL")
    for sim in router.sims[1:]:
        sim.knobs.update({"fault_budget": 0})
    for _ in range(3):
        assert text() == reference


def test_a_lost_decode_leg_moves_the_answer_to_a_new_pair() -> None:
    config = {"defaults": {"policy": {"name": "round_robin", "prefill": "round_robin"}}}
    sim_kwargs = {"context_answers": True, "bootstrap_timeout_s": 20.0}
    roles = ["prefill", "prefill", "decode", "decode"]
    with run_router(config=config, roles=roles, sim_kwargs=sim_kwargs) as fleet:
        reference = streamed(fleet, body(True))
        decode = [sim for sim in fleet.sims if sim.bootstrap is None]
        for sim in decode:
            sim.knobs.update(
                {"fail_after_tokens": 6, "fail_after_status": "UNAVAILABLE", "fault_budget": 1}
            )
        decode[1].knobs.update({"fault_budget": 0})
        before = migrations(fleet)
        for _ in range(2):
            assert streamed(fleet, body(True)) == reference
        key = '{outcome="migrated",reason="unavailable"}'
        counted(fleet, before, key, 1)


@pytest.mark.slow
def test_a_drained_worker_hands_its_streams_on_at_the_drain_timeout() -> None:
    """``DELETE /workers/{id}``: the worker's streams run on for ``drain_timeout_s``, then move
    to another worker as the worker is removed; none is cut."""
    config = {"defaults": {"policy": "round_robin"}, "drain_timeout_s": 1.0}
    sim_kwargs = {"context_answers": True, "delay_ms": 20.0}
    with run_router(config=config, sims=2, sim_kwargs=sim_kwargs) as fleet:
        requests = [body(True, max_tokens=150) for _ in range(6)]
        for i, request in enumerate(requests):
            request["messages"] = [{"role": "user", "content": f"drained story {i}"}]
        with ThreadPoolExecutor(6) as pool:
            references = list(pool.map(lambda r: streamed(fleet, r), requests))
            answers = [pool.submit(streamed, fleet, r) for r in requests]
            fleet.wait_until(lambda: sum(s.running for s in fleet.sims) == 6, timeout=20)
            workers = httpx.get(f"{fleet.base_url}/workers", timeout=10).json()["workers"]
            victim = workers[0]["id"]
            started = time.monotonic()
            gone = httpx.delete(f"{fleet.base_url}/workers/{victim}", timeout=10)
            assert gone.status_code == 202
            results = [future.result(timeout=60) for future in answers]
        assert results == references
        fleet.wait_until(
            lambda: victim not in httpx.get(f"{fleet.base_url}/workers", timeout=10).text,
            timeout=10,
        )
        assert time.monotonic() - started < 1.0 + 5.0  # the drain timeout, and some slack
