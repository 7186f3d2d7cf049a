"""What clients see when workers misbehave or clients go away: clear errors, never hangs,
and the worker is told to stop."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from .harness import MODEL, Router, run_router


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    # Without failover (test_migration_e2e has it): an echo sim cannot continue an answer.
    config = {
        "defaults": {"policy": "round_robin"},
        "server": {"keepalive_interval_s": 0.1},
        "migration": {"enabled": False},
    }
    with run_router(config=config) as running:
        yield running


@pytest.fixture(autouse=True)
def healthy_workers(router: Router) -> Iterator[None]:
    yield
    for sim in router.sims:
        sim.knobs.update(
            {"delay_ms": 0.0, "ttft_ms": 0.0, "fail_status": None, "fail_after_tokens": None,
             "hang": False, "fault_budget": None}
        )  # fmt: skip


def chat(stream: bool = False, text: str = "a reply of several tokens here") -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "stream": stream}


def test_failure_before_first_token_is_retried_on_another_worker(router: Router) -> None:
    router.sims[0].knobs.update({"fail_status": "UNAVAILABLE"})
    router.sims[1].knobs.update({"fail_status": None})
    for _ in range(4):  # round robin hits the failing worker at least once
        response = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=20)
        assert response.status_code == 200
        assert (
            response.json()["choices"][0]["message"]["content"] == "a reply of several tokens here"
        )


def test_client_error_from_worker_is_not_retried(router: Router) -> None:
    for sim in router.sims:
        sim.knobs.update({"fail_status": "INVALID_ARGUMENT", "fault_budget": 1})
    response = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=20)
    assert response.status_code == 400
    assert response.json()["error"]["message"]


def test_all_workers_failing_gives_a_quick_503(router: Router) -> None:
    for sim in router.sims:
        sim.knobs.update({"fail_status": "UNAVAILABLE"})
    response = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=20)
    assert response.status_code == 503
    assert "error" in response.json()


def test_failure_mid_stream_ends_with_error_event_then_done(router: Router) -> None:
    for sim in router.sims:
        sim.knobs.update({"fail_after_tokens": 2, "tokens_per_chunk": 1})
    with httpx.stream(
        "POST", f"{router.base_url}/v1/chat/completions", json=chat(stream=True), timeout=20
    ) as response:
        assert response.status_code == 200
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])
    assert error["error"]["message"]
    assert any("choices" in json.loads(e) for e in events[:-2])


def test_failure_mid_answer_without_streaming_is_an_error_status(router: Router) -> None:
    for sim in router.sims:
        sim.knobs.update({"fail_after_tokens": 2})
    response = httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=20)
    assert response.status_code >= 500
    assert response.json()["error"]["message"]


def test_a_worker_dying_mid_answer_is_retried_when_the_client_saw_nothing(
    router: Router,
) -> None:
    """A one-shot answer with a stop string is streamed by the worker (turnout watches for the
    stop): a worker that dies after its first chunk has shown the client nothing, so the
    request starts over on the other worker and the client gets the whole answer."""
    router.sims[0].knobs.update(
        {"fail_after_tokens": 2, "fail_after_status": "UNAVAILABLE", "fault_budget": 1}
    )
    body = {**chat(), "stop": ["never in the answer"]}
    url = f"{router.base_url}/v1/chat/completions"
    for i in range(2):  # round robin: one of them starts on the dying worker
        response = httpx.post(url, json=body, headers={"x-request-id": f"dies-{i}"}, timeout=20)
        assert response.status_code == 200, response.text
        assert (
            response.json()["choices"][0]["message"]["content"] == "a reply of several tokens here"
        )
    outcomes = router.sims[0].records.outcomes.items()
    [failed] = [rid for rid, o in outcomes if rid.startswith("dies-") and o == "error"]
    assert router.sims[0].records.generated[failed] == 2  # it had started answering
    rid = failed.rsplit("-", 1)[0]  # the client's id, then the router's suffix
    served = [o for r, o in router.sims[1].records.outcomes.items() if r.startswith(rid + "-")]
    assert served == ["stop"]


def test_client_disconnect_mid_stream_aborts_the_worker(router: Router) -> None:
    for sim in router.sims:
        sim.knobs.update({"delay_ms": 30.0})
    headers = {"x-request-id": "walk-away-1"}
    with httpx.stream(
        "POST", f"{router.base_url}/v1/chat/completions",
        json=chat(stream=True, text="word " * 60), headers=headers, timeout=20,
    ) as response:  # fmt: skip
        lines = response.iter_lines()
        next(line for line in lines if line.startswith("data: "))
    # the connection is closed here, long before the answer is complete
    router.wait_until(lambda: any("walk-away-1" in rid for s in router.sims for rid in s.aborted))
    router.wait_until(lambda: all(s.running == 0 for s in router.sims))

    def router_idle() -> bool:
        workers = httpx.get(f"{router.base_url}/workers").json()["workers"]
        return all(w["in_flight"] == 0 for w in workers)

    router.wait_until(router_idle)


def test_in_flight_counts_return_to_zero(router: Router) -> None:
    for _ in range(3):
        httpx.post(f"{router.base_url}/v1/chat/completions", json=chat(), timeout=20)
    workers = httpx.get(f"{router.base_url}/workers").json()["workers"]
    assert [w["in_flight"] for w in workers] == [0, 0]


def test_idle_stream_gets_keepalive_comments(router: Router) -> None:
    for sim in router.sims:
        sim.knobs.update({"delay_ms": 350.0})
    body = chat(stream=True, text="two words")
    with httpx.stream(
        "POST", f"{router.base_url}/v1/chat/completions", json=body, timeout=20
    ) as response:
        lines = [line for line in response.iter_lines() if line]
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    role_chunk = json.loads(lines[first_data][6:])
    assert role_chunk["choices"][0]["delta"]["role"] == "assistant"
    assert ": keep-alive" in lines
    assert lines[-1] == "data: [DONE]"


def test_client_disconnect_mid_batch_stream_aborts_every_prompt(router: Router) -> None:
    """A completions batch streams prompt after prompt: a client that leaves during the first
    prompt's output gets the later prompts' requests aborted too (they were opened up front)."""
    for sim in router.sims:
        sim.knobs.update({"delay_ms": 30.0})
    headers = {"x-request-id": "batch-away-1"}
    body = {"model": MODEL, "prompt": ["word " * 60] * 2, "max_tokens": 60, "stream": True}
    with httpx.stream(
        "POST", f"{router.base_url}/v1/completions", json=body, headers=headers, timeout=20
    ) as response:
        next(line for line in response.iter_lines() if line.startswith("data: "))

    def aborted(suffix: str) -> bool:
        return any(
            rid.startswith("batch-away-1") and rid.endswith(suffix)
            for s in router.sims
            for rid in s.aborted
        )

    router.wait_until(lambda: aborted("-0") and aborted("-1"))
    router.wait_until(lambda: all(s.running == 0 for s in router.sims))
