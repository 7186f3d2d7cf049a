"""Response details clients check, end to end (official openai client and raw HTTP): refusal
keys, usage in streams, matched_stop, logprob bytes, model cards, stops in one-shot answers,
stop_regex, refused fields and the default model."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from turnout.demo_model import path as demo_path
from turnout.sim import SimProcess

from .conftest import MODEL
from .harness import Router, run_router

CJK = "Hi 日本語 and 🎉🐙 ok"


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def post(router: Router, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{router.base_url}{path}", json=body, timeout=30)


def stream_chunks(router: Router, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``data:`` object of a streamed answer (``[DONE]`` checked and dropped)."""
    with httpx.stream(
        "POST", f"{router.base_url}{path}", json={**body, "stream": True}, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": user("Hello there"), **extra}


# -- refusal -----------------------------------------------------------------------------------


def test_chat_messages_and_logprobs_carry_refusal_null(router: Router) -> None:
    body = post(router, "/v1/chat/completions", chat(logprobs=True)).json()
    choice = body["choices"][0]
    assert "refusal" in choice["message"]
    assert choice["message"]["refusal"] is None
    assert choice["logprobs"]["refusal"] is None
    assert choice["logprobs"]["content"]
    chunks = stream_chunks(router, "/v1/chat/completions", chat(logprobs=True))
    with_logprobs = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["logprobs"]]
    assert with_logprobs
    assert all(lp["refusal"] is None for lp in with_logprobs)


# -- usage in streams --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_include_usage_puts_null_usage_on_every_chunk_but_the_last(
    router: Router, path: str
) -> None:
    body = chat() if "chat" in path else {"model": MODEL, "prompt": "Hello there"}
    chunks = stream_chunks(router, path, {**body, "stream_options": {"include_usage": True}})
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_continuous_usage_stats_report_usage_on_every_chunk(router: Router, path: str) -> None:
    body = (
        chat(messages=user("tell me a long story"), max_tokens=12)
        if "chat" in path
        else {"model": MODEL, "prompt": "tell me a long story", "max_tokens": 12}
    )
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = stream_chunks(router, path, {**body, "stream_options": options})
    *running, last = chunks
    assert all(c["usage"] is not None for c in running)
    counts = [c["usage"]["completion_tokens"] for c in running]
    assert counts == sorted(counts)
    assert counts[-1] == last["usage"]["completion_tokens"] == 12
    prompt = last["usage"]["prompt_tokens"]
    assert all(c["usage"]["prompt_tokens"] == prompt for c in running)
    assert all(
        c["usage"]["total_tokens"] == prompt + c["usage"]["completion_tokens"] for c in running
    )


def test_usage_chunks_with_the_openai_client(client: openai.OpenAI) -> None:
    options: Any = {"include_usage": True, "continuous_usage_stats": True}
    stream = client.chat.completions.create(
        model=MODEL, messages=user("tell me a long story"), max_tokens=6, stream=True,
        stream_options=options,
    )  # fmt: skip
    usages = [chunk.usage for chunk in stream]
    assert all(u is not None for u in usages)
    assert usages[-1].completion_tokens == 6


# -- matched_stop, reasoning_tokens --------------------------------------------------------------


def test_matched_stop_is_null_on_a_length_finish(router: Router, client: openai.OpenAI) -> None:
    long = chat(messages=user("tell me a long story"), max_tokens=3)
    choice = post(router, "/v1/chat/completions", long).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert "matched_stop" in choice
    assert choice["matched_stop"] is None
    finish = stream_chunks(router, "/v1/chat/completions", long)[-1]["choices"][0]
    assert finish["finish_reason"] == "length"
    assert "matched_stop" in finish
    assert finish["matched_stop"] is None
    text = client.completions.create(model=MODEL, prompt="tell me a long story", max_tokens=3)
    assert text.choices[0].model_extra == {"matched_stop": None}


def test_generate_reports_reasoning_tokens_when_asked(router: Router) -> None:
    body = {"text": "ponder this", "require_reasoning": True}
    meta = post(router, "/generate", body).json()["meta_info"]
    assert meta["reasoning_tokens"] > 0
    sent = [r for sim in router.sims for r in sim.requests if r.require_reasoning]
    assert sent, "require_reasoning reaches the worker"


# -- logprob bytes -----------------------------------------------------------------------------


def test_logprob_bytes_are_the_tokens_real_bytes(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=user(CJK), logprobs=True, top_logprobs=2
    )
    entries = reply.choices[0].logprobs.content
    assert any("\ufffd" in e.token for e in entries), "the sample splits characters"
    raw = b"".join(bytes(e.bytes) for e in entries)
    assert reply.choices[0].message.content == CJK
    assert raw.decode("utf-8") == CJK  # the EOS token ends the output: no logprob of its own
    for entry in entries:
        top = entry.top_logprobs[0]  # the sim ranks the sampled token first
        assert top.token == entry.token
        assert top.bytes == entry.bytes


# -- model cards -------------------------------------------------------------------------------


def test_model_card_and_list_agree_on_created(client: openai.OpenAI) -> None:
    (listed,) = client.models.list().data
    card = client.models.retrieve(MODEL)
    assert card.created == listed.created > 0


# -- stops in one-shot answers -----------------------------------------------------------------


def test_one_shot_usage_and_logprobs_end_where_the_stop_ends_the_text(
    client: openai.OpenAI,
) -> None:
    args: dict[str, Any] = {
        "model": MODEL, "messages": user("stopper"), "stop": ["STOP"], "logprobs": True,
    }  # fmt: skip
    once = client.chat.completions.create(**args)
    chunks = list(
        client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True})
    )
    streamed = [
        entry
        for chunk in chunks
        if chunk.choices and chunk.choices[0].logprobs
        for entry in chunk.choices[0].logprobs.content
    ]
    assert once.choices[0].message.content == "alpha beta "
    assert [e.token for e in once.choices[0].logprobs.content] == [e.token for e in streamed]
    assert once.usage.completion_tokens == chunks[-1].usage.completion_tokens == len(streamed)
    text = client.completions.create(
        model=MODEL, prompt="stopper", stop=["STOP"], logprobs=0, max_tokens=50
    )
    assert text.choices[0].text == "alpha beta "
    assert text.usage.completion_tokens == len(text.choices[0].logprobs.tokens)


# -- stop_regex --------------------------------------------------------------------------------


def test_stop_regex_ends_the_output_in_both_modes(router: Router, client: openai.OpenAI) -> None:
    regex = {"stop_regex": r"ST[O0]P\b"}
    once = client.chat.completions.create(model=MODEL, messages=user("stopper"), extra_body=regex)
    assert once.choices[0].message.content == "alpha beta "
    assert once.choices[0].model_extra["matched_stop"] == r"ST[O0]P\b"
    chunks = stream_chunks(router, "/v1/chat/completions", chat(messages=user("stopper"), **regex))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "alpha beta "
    generated = post(
        router, "/generate", {"text": "x: alpha beta STOP gamma", "sampling_params": regex}
    ).json()
    assert generated["text"] == "x: alpha beta "
    assert generated["meta_info"]["finish_reason"] == {"type": "stop", "matched": r"ST[O0]P\b"}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", chat(stop_regex="(")),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "stop_regex": ["a*"]}),
        ("/generate", {"text": "x", "sampling_params": {"stop_regex": "("}}),
    ],
)
def test_a_bad_stop_regex_is_a_400(router: Router, path: str, body: dict[str, Any]) -> None:
    response = post(router, path, body)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "stop_regex"


# -- fields turnout does not implement ----------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", chat(functions=[{"name": "f"}]), "functions"),
        ("/v1/chat/completions", chat(function_call="auto"), "function_call"),
        ("/v1/chat/completions", chat(audio={"voice": "alloy"}), "audio"),
        ("/v1/chat/completions", chat(modalities=["text", "audio"]), "modalities"),
        ("/v1/chat/completions", chat(web_search_options={}), "web_search_options"),
        ("/v1/chat/completions", chat(return_hidden_states=True), "return_hidden_states"),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "best_of": 3}, "best_of"),
        ("/generate", {"text": ["x", "y"], "lora_path": ["a", "b"]}, "lora_path"),
        ("/generate", {"text": "x", "image_data": "http://x/y.png"}, "image_data"),
        ("/generate", {"text": "x", "input_embeds": [[0.5]]}, "input_embeds"),
        ("/generate", {"text": "x", "token_ids_logprob": [1]}, "token_ids_logprob"),
        ("/generate", {"text": "x", "sampling_params": {"user": "u"}}, "sampling_params.user"),
    ],
)
def test_unimplemented_fields_are_refused_by_name(
    router: Router, path: str, body: dict[str, Any], param: str
) -> None:
    response = post(router, path, body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_fields_that_ask_for_nothing_are_accepted(router: Router) -> None:
    for body in (
        chat(modalities=["text"], user="u", metadata={"k": "v"}, store=False),
        {"model": MODEL, "prompt": "x", "best_of": 1, "user": "u"},
    ):
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        assert post(router, path, body).status_code == 200


def test_rid_names_the_response(router: Router) -> None:
    assert post(router, "/v1/chat/completions", chat(rid="my-rid-1")).json()["id"] == "my-rid-1"
    text = post(router, "/v1/completions", {"model": MODEL, "prompt": "x", "rid": "my-rid-2"})
    assert text.json()["id"] == "my-rid-2"


def test_stream_reasoning_false_sends_the_reasoning_in_one_piece(router: Router) -> None:
    chunks = stream_chunks(
        router, "/v1/chat/completions", chat(messages=user("ponder"), stream_reasoning=False)
    )
    pieces = [c["choices"][0]["delta"].get("reasoning_content") for c in chunks]
    assert [p for p in pieces if p] == ["Six times seven."]


def test_completions_honour_response_format(router: Router) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    body = {
        "model": MODEL, "prompt": "x", "max_tokens": 50,
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}},
    }  # fmt: skip
    reply = post(router, "/v1/completions", body).json()
    assert isinstance(json.loads(reply["choices"][0]["text"])["a"], int)


def test_generate_returns_top_logprobs_with_text(router: Router) -> None:
    body = {
        "text": "native api", "return_logprob": True, "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }  # fmt: skip
    meta = post(router, "/generate", body).json()["meta_info"]
    tokens = meta["output_token_logprobs"]
    assert all(isinstance(entry[2], str) for entry in tokens)
    assert [len(top) for top in meta["output_top_logprobs"]] == [2] * len(tokens)


def test_generate_returns_the_logprobs_of_the_token_ids_asked_for(router: Router) -> None:
    """SGLang's ``token_ids_logprob``: per output position, the logprobs of those ids
    (``output_token_ids_logprobs``), from the worker's ``token_ids_logprobs``."""
    body = {
        "text": "native api", "return_logprob": True, "token_ids_logprob": [5, 9],
        "return_text_in_logprobs": True, "stream": False,
    }  # fmt: skip
    meta = post(router, "/generate", body).json()["meta_info"]
    tokens = meta["output_token_logprobs"]
    rows = meta["output_token_ids_logprobs"]
    assert len(rows) == len(tokens) > 0
    for row, (sampled_value, sampled_id, _text) in zip(rows, tokens, strict=True):
        assert [entry[1] for entry in row] == [5, 9]
        assert all(isinstance(entry[2], str) for entry in row)
        for value, token_id, _ in row:
            assert value == sampled_value if token_id == sampled_id else value < sampled_value
    assert "output_top_logprobs" not in meta
    streamed = post(router, "/generate", {**body, "stream": True})
    assert streamed.status_code == 200
    assert '"output_token_ids_logprobs"' in streamed.text


# -- the default model -------------------------------------------------------------------------


def test_generate_without_model_uses_the_configured_default() -> None:
    with SimProcess("--served-model-name", "second") as second:
        config = {
            "workers": [{"url": second.url, "model": "second"}],
            "models": {"second": {"tokenizer_path": str(demo_path())}},
            "defaults": {"model": "demo-alias"},
        }
        model = {"aliases": ["demo-alias"]}
        with run_router(config, sims=1, model=model) as router:
            assert {m["id"] for m in httpx.get(f"{router.base_url}/v1/models").json()["data"]} == {
                MODEL,
                "second",
            }
            answer = post(router, "/generate", {"text": "no model named"})
            assert answer.status_code == 200, answer.text
            assert answer.json()["text"] == "no model named"
            (sim,) = router.sims
            assert [r.tokenized.original_text for r in sim.requests] == ["no model named"]
