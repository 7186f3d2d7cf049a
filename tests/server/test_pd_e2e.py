"""The chat suite against a prefill-decode fleet (1 prefill + 1 decode sim): the official
openai client → turnout → a PD pair, which only answers when turnout sends both legs the same
request with one rendezvous (see docs/simulator.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from turnout.demo_model import path as demo_path
from turnout.sim import SimWorker
from turnout.workers.ids import default_worker_id

from .conftest import MODEL
from .harness import Router, run_router

# The chat suite's cases, run again here against the PD router (pytest collects them in this
# module, with this module's ``router``).
from .test_chat_e2e import (  # noqa: F401
    test_logprobs_in_openai_shape,
    test_max_tokens_ends_with_length,
    test_n_choices_are_distinct_and_complete,
    test_named_tool_choice_returns_that_call,
    test_parallel_calls_keep_their_order,
    test_plain_chat_echoes_the_user_turn,
    test_reasoning_is_separated_and_counted,
    test_stop_string_is_enforced_by_the_router_and_aborts_the_worker,
    test_stop_string_streaming_and_no_stop_trim,
    test_streaming_matches_non_streaming,
    test_tool_call_parsed_in_both_modes,
    test_tool_choice_required_constrains_the_worker,
    user,
)
from .test_fields_e2e import (  # noqa: F401  (prompt logprobs come from the prefill leg)
    test_completions_echo_with_logprobs_covers_the_prompt,
    test_prompt_logprobs_cover_every_prompt_token,
)


@pytest.fixture(scope="module")
def router(script_file: Path) -> Iterator[Router]:
    with run_router(
        roles=["prefill", "decode"],
        sim_kwargs={"script": script_file, "bootstrap_timeout_s": 20.0},
        model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
        config={"defaults": {"policy": "round_robin"}},
    ) as running:
        yield running


def legs(router: Router, request_id: str) -> dict[str, list[object]]:
    """The requests each sim got whose id starts with ``request_id``, by role."""
    found: dict[str, list[object]] = {"prefill": [], "decode": []}
    for sim in router.sims:
        role = "prefill" if sim.bootstrap is not None else "decode"
        found[role] += [r for r in sim.requests if r.request_id.startswith(request_id)]
    return found


def test_both_legs_get_the_request_with_one_rendezvous(
    client: openai.OpenAI, router: Router
) -> None:
    client.chat.completions.create(
        model=MODEL, messages=user("pair me up"), extra_headers={"x-request-id": "pd-legs"}
    )
    sent = legs(router, "pd-legs")
    (prefill,) = sent["prefill"]
    (decode,) = sent["decode"]
    prefill_sim = next(s for s in router.sims if s.bootstrap is not None)
    for leg in (prefill, decode):
        params = leg.disaggregated_params  # type: ignore[attr-defined]
        assert params.bootstrap_host == "127.0.0.1"
        assert params.bootstrap_port == prefill_sim.bootstrap_port
        assert 0 <= params.bootstrap_room < 2**31
    assert prefill.disaggregated_params == decode.disaggregated_params  # type: ignore[attr-defined]
    assert prefill.tokenized.input_ids == decode.tokenized.input_ids  # type: ignore[attr-defined]


def test_each_choice_of_n_has_its_own_room(client: openai.OpenAI, router: Router) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user("pick a word"), n=3, extra_headers={"x-request-id": "pd-n3"}
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    sent = legs(router, "pd-n3")
    rooms = {leg.disaggregated_params.bootstrap_room for leg in sent["decode"]}  # type: ignore[attr-defined]
    assert len(sent["prefill"]) == len(sent["decode"]) == 3
    assert len(rooms) == 3
    assert rooms == {leg.disaggregated_params.bootstrap_room for leg in sent["prefill"]}  # type: ignore[attr-defined]


def test_completions_and_generate_are_served_by_the_pair(router: Router) -> None:
    completion = httpx.post(
        f"{router.base_url}/v1/completions",
        json={"model": MODEL, "prompt": ["one two", "three four"], "max_tokens": 3},
        timeout=30,
    )
    assert completion.status_code == 200, completion.text
    assert [c["index"] for c in completion.json()["choices"]] == [0, 1]
    with httpx.stream(
        "POST",
        f"{router.base_url}/generate",
        json={"model": MODEL, "text": "stream it", "stream": True},
        timeout=30,
    ) as response:
        assert response.status_code == 200
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["meta_info"]["finish_reason"]


def test_workers_show_their_roles(router: Router) -> None:
    listing = httpx.get(f"{router.base_url}/workers", timeout=10).json()
    roles = {w["role"] for w in listing["workers"]}
    assert roles == {"prefill", "decode"}
    (prefill,) = [w for w in listing["workers"] if w["role"] == "prefill"]
    assert prefill["bootstrap_port"] == next(s.bootstrap_port for s in router.sims if s.bootstrap)


def test_workers_added_over_the_api_carry_their_role(router: Router) -> None:
    base = router.base_url
    bad = httpx.post(
        f"{base}/workers",
        json={"url": "grpc://127.0.0.1:1", "role": "decode", "bootstrap_port": 9000},
        timeout=10,
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "bootstrap_port"
    unknown = httpx.post(
        f"{base}/workers", json={"url": "grpc://127.0.0.1:1", "role": "encode"}, timeout=10
    )
    assert unknown.status_code == 400

    async def start_decode() -> SimWorker:
        return await SimWorker(demo_path(), served_model_name=MODEL, role="decode").start()

    sim: SimWorker = router.call(start_decode)
    worker_id = default_worker_id(sim.url)
    try:
        added = httpx.post(
            f"{base}/workers?wait_s=10",
            json={"url": sim.url, "model": MODEL, "role": "decode"},
            timeout=20,
        )
        assert added.status_code == 201, added.text
        assert added.json()["role"] == "decode"
        assert added.json()["state"] == "ready"
        for i in range(4):  # round robin over two decode workers
            answer = httpx.post(
                f"{base}/v1/chat/completions",
                json={"model": MODEL, "messages": user(f"reach the new one {i}")},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
        assert sim.requests
        assert all(r.disaggregated_params.bootstrap_port for r in sim.requests)
    finally:
        httpx.delete(f"{base}/workers/{worker_id}?wait=true", timeout=20)
        router.call(sim.stop)
