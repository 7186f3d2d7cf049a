"""Request fields and the numbers answers carry, end to end (real router, sim workers, the
official openai client and raw HTTP): unknown fields, vLLM's extensions, stop tokens, logprobs
of echoed prompts, and ``/generate`` stream metadata."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from .conftest import MODEL, TOOLS
from .harness import Router, run_router
from .test_response_details_e2e import chat, post, stream_chunks


def test_completions_logprobs_zero_gives_objects_with_the_sampled_token(
    client: openai.OpenAI,
) -> None:
    reply = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=4, logprobs=0)
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None
    assert logprobs.tokens
    assert logprobs.top_logprobs
    assert [list(top) for top in logprobs.top_logprobs] == [[t] for t in logprobs.tokens]
    assert [top[t] for top, t in zip(logprobs.top_logprobs, logprobs.tokens, strict=True)] == (
        logprobs.token_logprobs
    )


# -- the stop token ----------------------------------------------------------------------------

EOS = "<|im_end|>"


@pytest.fixture(scope="module")
def special_router() -> Iterator[Router]:
    """A model whose tool parser needs special tokens decoded (llama's ``<|python_tag|>``)."""
    with run_router(sims=1, model={"tool_parser": "llama"}) as running:
        yield running


@pytest.mark.parametrize("stream", [False, True])
def test_no_stop_trim_does_not_show_the_stop_token_a_parser_needed(
    special_router: Router, stream: bool
) -> None:
    body = chat(tools=TOOLS, no_stop_trim=True)
    if stream:
        chunks = stream_chunks(special_router, "/v1/chat/completions", body)
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    else:
        content = post(special_router, "/v1/chat/completions", body).json()["choices"][0][
            "message"
        ]["content"]
    assert content
    assert EOS not in content
    # the client's own skip_special_tokens: false still shows it
    shown = post(
        special_router,
        "/v1/chat/completions",
        chat(tools=TOOLS, no_stop_trim=True, skip_special_tokens=False),
    ).json()
    assert shown["choices"][0]["message"]["content"].endswith(EOS)


def test_the_stop_token_is_not_in_logprobs_nor_an_empty_chunk(router: Router) -> None:
    answer = post(router, "/v1/chat/completions", chat(logprobs=True)).json()["choices"][0]
    tokens = [entry["token"] for entry in answer["logprobs"]["content"]]
    assert tokens
    assert EOS not in tokens
    assert "".join(tokens) == answer["message"]["content"]
    chunks = stream_chunks(router, "/v1/chat/completions", chat(logprobs=True))
    for chunk in chunks:
        choice = chunk["choices"][0]
        assert choice["delta"] or choice["finish_reason"], chunk
        assert EOS not in [
            entry["token"] for entry in (choice["logprobs"] or {}).get("content") or []
        ]
    completion = post(
        router, "/v1/completions", {"model": MODEL, "prompt": "Hello there", "logprobs": 1}
    ).json()["choices"][0]
    assert completion["logprobs"]["tokens"]
    assert EOS not in completion["logprobs"]["tokens"]
