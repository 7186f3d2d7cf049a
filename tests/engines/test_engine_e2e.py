"""The end-to-end core cases against vLLM- and TensorRT-LLM-protocol sims: the SGLang tests'
own bodies (imported, so pytest runs them here with this package's ``router`` and ``client``,
once per engine), plus what only these engines do: refusing what their protocol cannot carry.
"""

from __future__ import annotations

import httpx
import pytest

from tests.server import test_fields_e2e as fields
from tests.server.harness import MODEL, Router
from tests.server.test_chat_e2e import (
    test_logprobs_in_openai_shape,
    test_max_tokens_ends_with_length,
    test_n_choices_are_distinct_and_complete,
    test_parallel_calls_keep_their_order,
    test_plain_chat_echoes_the_user_turn,
    test_reasoning_is_separated_and_counted,
    test_response_format_json_schema_reaches_the_worker,
    test_stop_string_is_enforced_by_the_router_and_aborts_the_worker,
    test_stop_string_streaming_and_no_stop_trim,
    test_streaming_matches_non_streaming,
    test_tool_call_parsed_in_both_modes,
    test_tool_choice_required_constrains_the_worker,
)
from tests.server.test_embeddings_e2e import (
    test_a_batch_keeps_its_order_and_spreads_over_workers,
    test_one_string_with_the_client_default_base64,
)
from tests.server.test_failures_e2e import (
    test_client_disconnect_mid_stream_aborts_the_worker,
)
from tests.server.test_fields_e2e import (
    test_prompt_logprobs_cover_every_prompt_token,
)

__all__ = [
    "test_a_batch_keeps_its_order_and_spreads_over_workers",
    "test_client_disconnect_mid_stream_aborts_the_worker",
    "test_logprobs_in_openai_shape",
    "test_max_tokens_ends_with_length",
    "test_n_choices_are_distinct_and_complete",
    "test_one_string_with_the_client_default_base64",
    "test_parallel_calls_keep_their_order",
    "test_plain_chat_echoes_the_user_turn",
    "test_prompt_logprobs_cover_every_prompt_token",
    "test_reasoning_is_separated_and_counted",
    "test_response_format_json_schema_reaches_the_worker",
    "test_stop_string_is_enforced_by_the_router_and_aborts_the_worker",
    "test_stop_string_streaming_and_no_stop_trim",
    "test_streaming_matches_non_streaming",
    "test_tool_call_parsed_in_both_modes",
    "test_tool_choice_required_constrains_the_worker",
]


#: Between a worker's messages, so that the router sees a stop string before the rest of the
#: answer is in (and aborts the worker, as the stop tests check); 0 lets an answer arrive whole.
PACE_MS = 5.0


@pytest.fixture(autouse=True)
def paced_workers(router: Router) -> None:
    """Every test starts with paced, fault-free sims (a test may change their knobs)."""
    for sim in router.sims:
        sim.knobs.update(
            {"delay_ms": PACE_MS, "ttft_ms": 0.0, "fail_status": None, "fail_after_tokens": None,
             "hang": False, "fault_budget": None}
        )  # fmt: skip


def _refused(router: Router, path: str, body: dict[str, object], field: str) -> None:
    """``body`` is answered 400 ``unsupported_by_engine`` naming ``field``, and no worker saw it
    or was blamed for it."""
    before = sum(len(sim.requests) for sim in router.sims)
    answer = httpx.post(f"{router.base_url}{path}", json=body, timeout=20)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unsupported_by_engine"
    assert error["param"] == field
    assert field in error["message"]
    assert sum(len(sim.requests) for sim in router.sims) == before
    workers = httpx.get(f"{router.base_url}/workers").json()["workers"]
    assert all(w["state"] == "ready" for w in workers)


def test_workers_speak_the_engine_protocol(router: Router, engine: str) -> None:
    workers = httpx.get(f"{router.base_url}/workers").json()["workers"]
    assert [w["labels"].get("engine") for w in workers] == [engine, engine]
    # KV events (and the loads on them) come over the engine's own service.
    router.wait_until(lambda: all(sim.records.kv_subscriptions for sim in router.sims))


def test_what_neither_engine_carries_is_refused_naming_the_field(router: Router) -> None:
    body = {"text": "x", "return_logprob": True, "token_ids_logprob": [5, 9]}
    _refused(router, "/generate", body, "token_ids_logprob")


def test_a_logit_bias_is_refused_by_trtllm_only(router: Router, engine: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "max_tokens": 3}
    biased = {**body, "logit_bias": {"42": 5.0}}
    if engine == "trtllm":
        _refused(router, "/v1/chat/completions", biased, "logit_bias")
        return
    answer = httpx.post(f"{router.base_url}/v1/chat/completions", json=biased, timeout=20)
    assert answer.status_code == 200, answer.text
    sent = next(s for sim in router.sims for s in sim.requests if s.sampling_params.logit_bias)
    assert dict(sent.sampling_params.logit_bias) == {"42": 5.0}


@pytest.mark.parametrize("stream", [False, True])
def test_completions_echo_with_logprobs(router: Router, engine: str, stream: bool) -> None:
    """The prompt's logprobs lead the answer; TensorRT-LLM sends them with its last message
    only, which is too late for a stream: refused there."""
    if engine == "trtllm" and stream:
        body = {"model": MODEL, "prompt": "Hello there", "echo": True, "logprobs": 1,
                "max_tokens": 4, "stream": True}  # fmt: skip
        _refused(router, "/v1/completions", body, "prompt_logprobs")
        return
    fields.test_completions_echo_with_logprobs_covers_the_prompt(router, stream)
