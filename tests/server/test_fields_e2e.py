"""Request fields and the numbers answers carry, end to end (real router, sim workers, the
official openai client and raw HTTP): unknown fields, vLLM's extensions, stop tokens, logprobs
of echoed prompts, and ``/generate`` stream metadata."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from turnout.demo_model import path as demo_path
from turnout.sim.embedding import DEFAULT_EMBEDDING_DIM, embed_ids
from turnout.tokenizer import ModelTokenizer

from .conftest import MODEL, TOOLS
from .harness import Router, run_router
from .test_embeddings_e2e import float32
from .test_response_details_e2e import chat, post, stream_chunks, user

TOKENIZER = ModelTokenizer.from_dir(demo_path())


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


# -- running counts ----------------------------------------------------------------------------


def test_streamed_generate_reports_prompt_and_reasoning_tokens_in_every_chunk(
    router: Router,
) -> None:
    body = {"text": "ponder this", "require_reasoning": True}
    chunks = stream_chunks(router, "/generate", body)
    metas = [c["meta_info"] for c in chunks]
    assert len(metas) > 2
    prompt = metas[-1]["prompt_tokens"]
    assert prompt > 0
    assert [m["prompt_tokens"] for m in metas] == [prompt] * len(metas)
    reasoning = [m["reasoning_tokens"] for m in metas]
    assert reasoning == sorted(reasoning)
    assert reasoning[0] > 0
    assert reasoning[-1] == post(router, "/generate", body).json()["meta_info"]["reasoning_tokens"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_continuous_usage_stats_count_reasoning_tokens(router: Router, path: str) -> None:
    body = (
        chat(messages=user("ponder this"))
        if "chat" in path
        else {
            "model": MODEL,
            "prompt": "ponder this",
        }
    )
    options = {"include_usage": True, "continuous_usage_stats": True}
    *running, last = stream_chunks(router, path, {**body, "stream_options": options})
    counts = [c["usage"]["completion_tokens_details"]["reasoning_tokens"] for c in running]
    assert counts == sorted(counts)
    if "chat" in path:  # the qwen3 parser splits the reasoning off
        assert counts[-1] == last["usage"]["completion_tokens_details"]["reasoning_tokens"] > 0


# -- unknown fields and vLLM's extensions ------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/chat/completions", chat(temprature=0.2), "temprature"),
        ("/v1/chat/completions", chat(guided_json={"type": "object"}), "guided_json"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "max_tokns": 3}, "max_tokns"),
        ("/v1/embeddings", {"model": MODEL, "input": "x", "normalize": False}, "normalize"),
    ],
)
def test_an_unknown_field_is_refused_by_name(
    client: openai.OpenAI, path: str, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.post(path.removeprefix("/v1"), body=body, cast_to=object)
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("unsupported_parameter", field)
    assert field in error["message"]


def test_what_popular_clients_send_is_accepted(client: openai.OpenAI) -> None:
    """Every field of OpenAI's chat request a client library may send (the Agents SDK, the
    Vercel AI SDK, pydantic-ai, langchain…) is taken, those that change nothing included."""
    reply = client.chat.completions.create(
        model=MODEL,
        messages=user("Hello there"),
        frequency_penalty=0,
        presence_penalty=0,
        logit_bias={},
        logprobs=False,
        max_completion_tokens=8,
        metadata={"k": "v"},
        modalities=["text"],
        n=1,
        parallel_tool_calls=True,
        prediction={"type": "content", "content": "Hello"},
        prompt_cache_key="k",
        prompt_cache_retention="in_memory",
        reasoning_effort="low",
        safety_identifier="s",
        seed=1,
        service_tier="auto",
        stop=None,
        store=False,
        stream_options=None,
        temperature=0,
        top_p=1,
        user="u",
        verbosity="low",
        extra_body={"top_k": 5, "separate_reasoning": True},
    )
    assert reply.choices[0].message.content
    text = client.completions.create(
        model=MODEL, prompt="x", best_of=1, echo=False, suffix=None, user="u", seed=1
    )
    assert text.choices[0].text
    vector = client.embeddings.create(model=MODEL, input="x", dimensions=None, user="u")
    assert vector.data[0].embedding


def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens(router: Router) -> None:
    text = "one two three four five six seven eight"
    ids = TOKENIZER.encode(text, add_special_tokens=True)
    kept = ids[-3:]
    whole = post(router, "/v1/embeddings", {"model": MODEL, "input": text}).json()
    cut = post(
        router, "/v1/embeddings", {"model": MODEL, "input": text, "truncate_prompt_tokens": 3}
    ).json()
    assert cut["usage"]["prompt_tokens"] == 3
    assert cut["data"][0]["embedding"] == pytest.approx(
        float32(embed_ids(kept, DEFAULT_EMBEDDING_DIM)), abs=1e-6
    )
    assert cut["data"][0]["embedding"] != whole["data"][0]["embedding"]
    for prompt in (text, ids):
        answer = post(
            router,
            "/v1/completions",
            {"model": MODEL, "prompt": prompt, "truncate_prompt_tokens": 3, "echo": True},
        ).json()
        assert answer["usage"]["prompt_tokens"] == 3
        assert answer["choices"][0]["text"].startswith(TOKENIZER.decode(kept))
        assert not answer["choices"][0]["text"].startswith("one")
    # -1: as many as the model takes, so a short prompt stays whole
    full = post(
        router, "/v1/completions", {"model": MODEL, "prompt": text, "truncate_prompt_tokens": -1}
    ).json()
    assert full["usage"]["prompt_tokens"] == len(ids)


def test_return_token_ids_gives_the_prompts_and_the_outputs_ids(
    router: Router, client: openai.OpenAI
) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=user("Hello there"),
        logprobs=True,
        extra_body={"return_token_ids": True, "return_tokens_as_token_ids": True},
    )
    body = reply.model_dump()
    prompt_ids = body["prompt_token_ids"]
    assert len(prompt_ids) == body["usage"]["prompt_tokens"]
    output_ids = body["choices"][0]["token_ids"]
    assert TOKENIZER.decode(output_ids).startswith(body["choices"][0]["message"]["content"])
    entries = body["choices"][0]["logprobs"]["content"]
    assert [entry["token"] for entry in entries] == [f"token_id:{i}" for i in output_ids][
        : len(entries)
    ]
    chunks = stream_chunks(router, "/v1/chat/completions", chat(return_token_ids=True))
    assert chunks[0]["prompt_token_ids"] == prompt_ids
    streamed = [i for c in chunks[1:] for i in c["choices"][0].get("token_ids") or []]
    assert streamed == output_ids
    text = post(
        router,
        "/v1/completions",
        {"model": MODEL, "prompt": "Hello there", "return_token_ids": True},
    ).json()["choices"][0]
    assert text["prompt_token_ids"] == TOKENIZER.encode("Hello there", add_special_tokens=True)
    assert TOKENIZER.decode(text["token_ids"]).startswith(text["text"])


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_prompt_logprobs_cover_every_prompt_token(router: Router, path: str) -> None:
    body = (
        chat(prompt_logprobs=2)
        if "chat" in path
        else {"model": MODEL, "prompt": "Hello there", "prompt_logprobs": 2}
    )
    answer = post(router, path, body).json()
    logprobs = (
        answer["prompt_logprobs"] if "chat" in path else answer["choices"][0]["prompt_logprobs"]
    )
    assert len(logprobs) == answer["usage"]["prompt_tokens"]
    assert logprobs[0] is None
    assert all(1 <= len(entry) <= 3 for entry in logprobs[1:])
    assert all(
        all(v["logprob"] <= 0 and isinstance(v["decoded_token"], str) for v in entry.values())
        for entry in logprobs[1:]
    )
    streamed = post(router, path, {**body, "stream": True})
    assert streamed.status_code == 400
    assert streamed.json()["error"]["param"] == "prompt_logprobs"


def test_chat_echo_starts_the_answer_with_the_last_assistant_message(router: Router) -> None:
    messages = [*user("Hello there"), {"role": "assistant", "content": "Well, "}]
    answer = post(router, "/v1/chat/completions", chat(messages=messages, echo=True)).json()
    content = answer["choices"][0]["message"]["content"]
    assert content.startswith("Well, ")
    assert len(content) > len("Well, ")
    chunks = stream_chunks(router, "/v1/chat/completions", chat(messages=messages, echo=True))
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert streamed == content
    plain = post(  # a user's message is not the answer's role: not echoed
        router, "/v1/chat/completions", chat(messages=user("ponder this"), echo=True)
    ).json()
    assert plain["choices"][0]["message"]["content"] == "The answer is 42."


@pytest.mark.parametrize("stream", [False, True])
def test_completions_echo_with_logprobs_covers_the_prompt(router: Router, stream: bool) -> None:
    prompt = "Hello there"
    prompt_ids = TOKENIZER.encode(prompt, add_special_tokens=True)
    body = {"model": MODEL, "prompt": prompt, "echo": True, "logprobs": 1, "max_tokens": 4}
    if stream:
        chunks = stream_chunks(router, "/v1/completions", body)
        first = chunks[0]["choices"][0]
        assert first["text"] == prompt
        tokens = first["logprobs"]["tokens"]
        values = first["logprobs"]["token_logprobs"]
        tops = first["logprobs"]["top_logprobs"]
    else:
        choice = post(router, "/v1/completions", body).json()["choices"][0]
        assert choice["text"].startswith(prompt)
        logprobs = choice["logprobs"]
        tokens, values, tops = (
            logprobs["tokens"],
            logprobs["token_logprobs"],
            logprobs["top_logprobs"],
        )
        assert len(tokens) > len(prompt_ids)
        offsets = logprobs["text_offset"]
        assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    assert tokens[: len(prompt_ids)] == [TOKENIZER.decode([i]) for i in prompt_ids]
    assert values[0] is None
    assert tops[0] is None
    assert all(v <= 0 for v in values[1:])
