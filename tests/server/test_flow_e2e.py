"""Every endpoint on the one flow: with several prompts and n > 1, the streamed answer rebuilt
from its chunks equals the one-shot answer, choice by choice (both read the same events)."""

from __future__ import annotations

import json
from typing import Any

import httpx

from .conftest import MODEL
from .harness import Router


def post(router: Router, path: str, body: dict[str, Any]) -> Any:
    response = httpx.post(f"{router.base_url}{path}", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def stream(router: Router, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream(
        "POST", f"{router.base_url}{path}", json={**body, "stream": True}, timeout=30
    ) as response:
        assert response.status_code == 200
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(item) for item in data[:-1]]


def test_completions_batch_streamed_equals_one_shot(router: Router) -> None:
    body = {
        "model": MODEL,
        "prompt": ["first prompt", "the second one"],
        "n": 2,
        "max_tokens": 20,
        "echo": True,
        "logprobs": 1,
    }
    whole = post(router, "/v1/completions", body)
    chunks = stream(router, "/v1/completions", {**body, "stream_options": {"include_usage": True}})

    texts: dict[int, str] = {}
    tokens: dict[int, list[str]] = {}
    finish: dict[int, str] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            i = choice["index"]
            texts[i] = texts.get(i, "") + choice["text"]
            if choice["logprobs"]:
                tokens.setdefault(i, []).extend(choice["logprobs"]["tokens"])
            if choice["finish_reason"]:
                finish[i] = choice["finish_reason"]
    assert [c["index"] for c in whole["choices"]] == [0, 1, 2, 3]
    assert texts == {c["index"]: c["text"] for c in whole["choices"]}
    # Choice k * n + i answers prompt k: its text starts with that prompt (echo).
    assert texts[0] == "first prompt" * 2  # echo, then the sim's echo of the prompt
    assert texts[1].startswith("first prompt")
    assert texts[2] == "the second one" * 2
    assert texts[3].startswith("the second one")
    assert tokens == {c["index"]: c["logprobs"]["tokens"] for c in whole["choices"]}
    assert finish == {c["index"]: c["finish_reason"] for c in whole["choices"]}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == whole["usage"]


def test_generate_batch_streamed_equals_one_shot(router: Router) -> None:
    body = {
        "text": ["a b", "the second prompt"],
        "sampling_params": {"max_new_tokens": 16, "n": 2},
        "return_logprob": True,
        "rid": "flow-batch",
    }
    whole = post(router, "/generate", body)
    last: dict[int, dict[str, Any]] = {}
    for chunk in stream(router, "/generate", body):
        last[chunk["index"]] = chunk
    assert [item["index"] for item in whole] == [0, 1, 2, 3]
    assert sorted(last) == [0, 1, 2, 3]
    for item in whole:
        final = last[item["index"]]
        assert final["text"] == item["text"]
        assert final["output_ids"] == item["output_ids"]
        for meta in (final["meta_info"], item["meta_info"]):
            meta.pop("e2e_latency")
        assert final["meta_info"] == item["meta_info"]
    # Each prompt's choices report that prompt's own token count.
    assert whole[0]["meta_info"]["prompt_tokens"] < whole[2]["meta_info"]["prompt_tokens"]
    assert [item["meta_info"]["id"] for item in whole] == [f"flow-batch-{i}" for i in range(4)]


def test_chat_n_streamed_equals_one_shot(router: Router) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "say this twice"}],
        "n": 2,
        "logprobs": True,
    }
    whole = post(router, "/v1/chat/completions", body)
    content: dict[int, str] = {}
    finish: dict[int, str] = {}
    for chunk in stream(router, "/v1/chat/completions", body):
        for choice in chunk["choices"]:
            content[choice["index"]] = content.get(choice["index"], "") + (
                choice["delta"].get("content") or ""
            )
            if choice["finish_reason"]:
                finish[choice["index"]] = choice["finish_reason"]
    assert content == {c["index"]: c["message"]["content"] for c in whole["choices"]}
    assert finish == {c["index"]: c["finish_reason"] for c in whole["choices"]}
