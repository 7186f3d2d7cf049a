"""Text completions, SGLang /generate and the utility routes, end to end."""

from __future__ import annotations

import itertools
import json

import httpx
import openai
import pytest

from tests.support import sse_events

from .conftest import MODEL
from .harness import Router


def test_completion_text_prompt_with_echo(client: openai.OpenAI) -> None:
    reply = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=50)
    assert reply.choices[0].text == "The quick brown fox"
    echoed = client.completions.create(
        model=MODEL, prompt="Echo me", max_tokens=50, echo=True, logprobs=1
    )
    assert echoed.choices[0].text == "Echo meEcho me"
    assert echoed.choices[0].logprobs.tokens


def test_completion_batch_of_prompts_and_token_ids(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL, prompt=["first one", "second one"], max_tokens=20
    )
    assert [c.text for c in reply.choices] == ["first one", "second one"]
    assert [c.index for c in reply.choices] == [0, 1]
    ids = client.completions.create(model=MODEL, prompt="count to three", max_tokens=20)
    assert ids.usage.prompt_tokens > 0


def test_completion_streaming(client: openai.OpenAI) -> None:
    text = "".join(
        chunk.choices[0].text
        for chunk in client.completions.create(
            model=MODEL, prompt="streamed completion", max_tokens=50, stream=True
        )
        if chunk.choices
    )
    assert text == "streamed completion"


def test_generate_single_and_batch(router: Router) -> None:
    one = httpx.post(
        f"{router.base_url}/generate",
        json={"text": "native api", "sampling_params": {"max_new_tokens": 32, "temperature": 0}},
    ).json()
    assert one["text"] == "native api"
    assert one["meta_info"]["finish_reason"]["type"] == "stop"
    assert one["meta_info"]["completion_tokens"] == len(one["output_ids"])
    assert one["meta_info"]["prompt_tokens"] > 0
    batch = httpx.post(
        f"{router.base_url}/generate",
        json={"text": ["a b", "c d"], "sampling_params": {"max_new_tokens": 8}},
    ).json()
    assert [item["text"] for item in batch] == ["a b", "c d"]
    limited = httpx.post(
        f"{router.base_url}/generate",
        json={"text": "tell me a long story", "sampling_params": {"max_new_tokens": 3}},
    ).json()
    assert limited["meta_info"]["finish_reason"] == {"type": "length", "length": 3}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"text": ["a", "b", "c"], "sampling_params": {"n": 50}}, "text"),
        ({"input_ids": [[1, 2]] * 129}, "input_ids"),
    ],
)
def test_generate_batch_past_128_choices_is_refused(
    router: Router, body: dict[str, object], param: str
) -> None:
    """Prompts × n is bounded as for completions: each choice is a sequence to generate."""
    refused = httpx.post(f"{router.base_url}/generate", json=body, timeout=10)
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == param


def test_generate_streaming_accumulates_text(router: Router) -> None:
    with httpx.stream(
        "POST", f"{router.base_url}/generate", json={"text": "streaming native", "stream": True}
    ) as response:
        events = sse_events(response.read().decode())
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["text"] == "streaming native"
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "stop"
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))


def test_generate_rejects_unknown_sampling_params(router: Router) -> None:
    response = httpx.post(
        f"{router.base_url}/generate", json={"text": "x", "sampling_params": {"temprature": 1}}
    )
    assert response.status_code == 400
    assert "temprature" in response.json()["error"]["message"]


def test_models_tokenize_detokenize(router: Router, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    tokens = httpx.post(
        f"{router.base_url}/v1/tokenize", json={"model": MODEL, "prompt": "héllo wörld"}
    ).json()
    assert tokens["count"] == len(tokens["tokens"])
    text = httpx.post(
        f"{router.base_url}/v1/detokenize", json={"model": MODEL, "tokens": tokens["tokens"]}
    ).json()
    assert text["text"] == "héllo wörld"
    bad = httpx.post(f"{router.base_url}/v1/detokenize", json={"tokens": [10**9]})
    assert bad.status_code == 400


def test_parse_endpoints_use_the_models_parsers(router: Router) -> None:
    calls = httpx.post(
        f"{router.base_url}/parse/function_call",
        json={"text": 'Hi <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'},
    ).json()
    assert calls["normal_text"] == "Hi "
    assert calls["calls"] == [{"name": "f", "arguments": '{"a": 1}'}]
    reasoning = httpx.post(
        f"{router.base_url}/parse/reasoning", json={"text": "<think>hmm</think>ok"}
    ).json()
    assert reasoning == {"reasoning_text": "hmm", "normal_text": "ok"}
    unknown = httpx.post(
        f"{router.base_url}/parse/function_call", json={"text": "x", "parser": "nope"}
    )
    assert unknown.status_code == 400


def test_health_readiness_and_worker_info(router: Router) -> None:
    assert httpx.get(f"{router.base_url}/health").json() == {"status": "ok"}
    ready = httpx.get(f"{router.base_url}/readiness")
    assert ready.status_code == 200
    info = httpx.get(f"{router.base_url}/get_model_info").json()
    assert "turnout-sim" in json.dumps(info) or info.get("served_model_name") == MODEL
    assert httpx.get(f"{router.base_url}/health_generate").json()["status"] == "ok"
    workers = httpx.get(f"{router.base_url}/workers").json()
    assert workers["total"] == 2
    assert {w["state"] for w in workers["workers"]} == {"ready"}


def test_generate_refuses_prompt_logprobs_clearly(router: Router) -> None:
    response = httpx.post(f"{router.base_url}/generate", json={"text": "x", "logprob_start_len": 0})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "logprob_start_len"
    assert response.json()["error"]["code"] == "unsupported_parameter"  # as docs/api.md says


def test_generate_treats_an_empty_constraint_as_none(router: Router) -> None:
    """Found by the fuzz test: an empty ``ebnf`` was a 500; SGLang tests constraints for truth."""
    for kind in ("ebnf", "regex", "json_schema"):
        reply = httpx.post(
            f"{router.base_url}/generate",
            json={"input_ids": [5, 6], "sampling_params": {kind: "", "max_new_tokens": 2}},
            timeout=10,
        )
        assert reply.status_code == 200, reply.text
