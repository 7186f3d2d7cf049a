"""``POST /v1/embeddings`` end to end with the official ``openai`` client: the router tokenizes,
the simulated workers answer ``Embed`` with vectors the test recomputes
(:func:`turnout.sim.embedding.embed_ids`), and the answer has OpenAI's shape exactly."""

from __future__ import annotations

import base64
import json
import math
import shutil
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from turnout.demo_model import path as demo_path
from turnout.sim.embedding import DEFAULT_EMBEDDING_DIM, embed_ids
from turnout.tokenizer import ModelTokenizer

from .conftest import MODEL
from .harness import Router, run_router

TOKENIZER = ModelTokenizer.from_dir(demo_path())


def ids_of(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=True)


def expected(ids: list[int], dim: int = DEFAULT_EMBEDDING_DIM) -> list[float]:
    return embed_ids(ids, dim)


def float32(values: list[float]) -> list[float]:
    """``values`` as the float32 numbers the wire carries."""
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


def embed_requests(router: Router, prefix: str) -> list[Any]:
    return [
        request
        for sim in router.sims
        for request in sim.records.embed_requests
        if request.request_id.startswith(prefix)
    ]


def test_one_string_with_the_client_default_base64(client: openai.OpenAI) -> None:
    text = "The quick brown fox jumped over the lazy dog"
    answer = client.embeddings.create(model=MODEL, input=text)  # the client asks for base64
    ids = ids_of(text)
    assert answer.object == "list"
    assert answer.model == MODEL
    [item] = answer.data
    assert (item.object, item.index) == ("embedding", 0)
    assert item.embedding == float32(expected(ids))  # exactly the worker's float32 values
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (len(ids), len(ids))


def test_float_format_is_openais_shape(router: Router) -> None:
    body = {"model": MODEL, "input": "hello world", "encoding_format": "float"}
    response = httpx.post(f"{router.base_url}/v1/embeddings", json=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"].startswith("embd-")
    answer = response.json()
    assert list(answer) == ["object", "data", "model", "usage"]
    assert answer["object"] == "list"
    assert answer["model"] == MODEL
    [item] = answer["data"]
    assert list(item) == ["object", "embedding", "index"]
    assert item["embedding"] == float32(expected(ids_of("hello world")))
    n = len(ids_of("hello world"))
    assert answer["usage"] == {"prompt_tokens": n, "total_tokens": n}


def test_base64_is_little_endian_float32(router: Router) -> None:
    body = {"model": MODEL, "input": "hello world", "encoding_format": "base64"}
    answer = httpx.post(f"{router.base_url}/v1/embeddings", json=body, timeout=30).json()
    raw = base64.b64decode(answer["data"][0]["embedding"])
    assert len(raw) == 4 * DEFAULT_EMBEDDING_DIM
    values = list(struct.unpack(f"<{DEFAULT_EMBEDDING_DIM}f", raw))
    assert values == float32(expected(ids_of("hello world")))


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_a_batch_keeps_its_order_and_spreads_over_workers(
    client: openai.OpenAI, router: Router, encoding_format: Any
) -> None:
    texts = [f"sentence number {i} about {'cats' if i % 2 else 'dogs'}" for i in range(12)]
    response = client.embeddings.with_raw_response.create(
        model=MODEL, input=texts, encoding_format=encoding_format
    )
    answer = response.parse()
    assert [item.index for item in answer.data] == list(range(12))
    for text, item in zip(texts, answer.data, strict=True):
        if encoding_format == "float":
            assert item.embedding == float32(expected(ids_of(text)))
        else:  # the client decodes base64 itself when it asked for it: here we did
            raw = base64.b64decode(item.embedding)  # type: ignore[arg-type]
            assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == float32(expected(ids_of(text)))
    assert answer.usage.prompt_tokens == sum(len(ids_of(t)) for t in texts)
    request_id = response.headers["x-request-id"]
    sent = embed_requests(router, request_id)
    assert sorted(r.request_id for r in sent) == sorted(f"{request_id}-{k}" for k in range(12))
    assert all(len(sim.records.embed_requests) for sim in router.sims)  # round robin
    by_id = {r.request_id: r for r in sent}
    assert by_id[f"{request_id}-3"].tokenized.original_text == texts[3]
    assert list(by_id[f"{request_id}-3"].tokenized.input_ids) == ids_of(texts[3])


def test_token_arrays(client: openai.OpenAI) -> None:
    one = client.embeddings.create(model=MODEL, input=[5, 6, 7, 8], encoding_format="float")
    assert one.data[0].embedding == float32(expected([5, 6, 7, 8]))
    assert one.usage.prompt_tokens == 4
    many = client.embeddings.create(
        model=MODEL, input=[[5, 6], [9, 10, 11], [12]], encoding_format="float"
    )
    assert [item.embedding for item in many.data] == [
        float32(expected(ids)) for ids in ([5, 6], [9, 10, 11], [12])
    ]
    assert many.usage.prompt_tokens == 6


def test_strings_and_token_arrays_mixed(client: openai.OpenAI) -> None:
    answer = client.embeddings.create(
        model=MODEL,
        input=["hello", [5, 6]],  # type: ignore[list-item]
        encoding_format="float",
    )
    assert answer.data[0].embedding == float32(expected(ids_of("hello")))
    assert answer.data[1].embedding == float32(expected([5, 6]))


def test_dimensions_are_refused_for_a_model_without_matryoshka(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=MODEL, input="x", dimensions=16)
    error = info.value.body
    assert isinstance(error, dict)
    assert error["param"] == "dimensions"
    assert "matryoshka" in error["message"]


def test_an_input_longer_than_the_context_is_refused(router: Router) -> None:
    body = {"model": MODEL, "input": ["short", [7] * 9000]}
    response = httpx.post(f"{router.base_url}/v1/embeddings", json=body, timeout=30)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input[1]")


def test_too_many_inputs_are_refused(router: Router) -> None:
    body = {"model": MODEL, "input": ["x"] * 2049}
    response = httpx.post(f"{router.base_url}/v1/embeddings", json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert "more than 2048" in response.json()["error"]["message"]


def test_an_unknown_model_is_a_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="no-such-model", input="x")


def test_a_long_batch_is_tokenized_and_answered(client: openai.OpenAI) -> None:
    texts = [f"{i} " + "lorem ipsum dolor sit amet " * 40 for i in range(300)]  # ~300 KB
    answer = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    assert len(answer.data) == 300
    assert answer.data[123].embedding == float32(expected(ids_of(texts[123])))


# -- a model whose embeddings may be shortened, and failing workers ---------------------------


@pytest.fixture(scope="module")
def matryoshka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    model_dir = tmp_path_factory.mktemp("matryoshka") / "model"
    shutil.copytree(demo_path(), model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    config.update({"hidden_size": 96, "matryoshka_dimensions": [32, 64, 96]})
    (model_dir / "config.json").write_text(json.dumps(config))
    with run_router(model_dir=model_dir, config={"defaults": {"policy": "round_robin"}}) as r:
        yield r


def test_dimensions_shorten_and_renormalise(matryoshka: Router) -> None:
    client = openai.OpenAI(base_url=f"{matryoshka.base_url}/v1", api_key="x", max_retries=0)
    full = client.embeddings.create(model=MODEL, input="hello world", encoding_format="float")
    assert len(full.data[0].embedding) == 96
    short = client.embeddings.create(model=MODEL, input="hello world", dimensions=32)
    head = float32(expected(ids_of("hello world"), 96))[:32]
    norm = math.sqrt(sum(v * v for v in head))
    assert short.data[0].embedding == pytest.approx([v / norm for v in head], abs=1e-6)
    assert math.isclose(sum(v * v for v in short.data[0].embedding), 1.0, abs_tol=1e-5)
    for bad in (48, 128):  # not one of the model's lengths
        with pytest.raises(openai.BadRequestError) as info:
            client.embeddings.create(model=MODEL, input="x", dimensions=bad)
        assert "[32, 64, 96]" in str(info.value)


def test_a_failing_worker_is_retried_on_the_other(matryoshka: Router) -> None:
    client = openai.OpenAI(base_url=f"{matryoshka.base_url}/v1", api_key="x", max_retries=0)
    for sim in matryoshka.sims:
        sim.records.clear()
    matryoshka.sims[0].knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 2})
    answer = client.embeddings.create(
        model=MODEL, input=["a", "b", "c", "d"], encoding_format="float"
    )
    assert [item.embedding for item in answer.data] == [
        float32(expected(ids_of(t), 96)) for t in "abcd"
    ]
    # Round robin sends inputs 0 and 2 to the first worker: both fail and go to the other.
    sent = [len(sim.records.embed_requests) for sim in matryoshka.sims]
    assert sent == [2, 4]
    for sim in matryoshka.sims:
        sim.knobs.update({"fail_status": None, "fault_budget": None})


def test_all_workers_failing_is_an_error_answer(matryoshka: Router) -> None:
    for sim in matryoshka.sims:
        sim.knobs.update({"fail_status": "INTERNAL"})
    try:
        body = {"model": MODEL, "input": ["a", "b", "c"]}
        response = httpx.post(f"{matryoshka.base_url}/v1/embeddings", json=body, timeout=30)
    finally:
        for sim in matryoshka.sims:
            sim.knobs.update({"fail_status": None})
    assert response.status_code == 500, response.text
    assert response.json()["error"]["message"].startswith("the worker failed the request")


def test_a_client_that_leaves_aborts_the_calls(matryoshka: Router) -> None:
    # Only this request's calls count: an earlier request's calls and aborts may still land on
    # the workers after its answer (test_all_workers_failing's cancelled calls are aborted in
    # the background), so a count of everything the workers saw can overshoot 4 and never be 4.
    prefix = "client-leaves-"
    for sim in matryoshka.sims:
        sim.records.clear()
        sim.knobs.update({"hang": True})

    def calls() -> set[tuple[int, str]]:
        return {
            (worker, request.request_id)
            for worker, sim in enumerate(matryoshka.sims)
            for request in sim.records.embed_requests
            if request.request_id.startswith(prefix)
        }

    def aborted() -> list[tuple[int, str]]:
        return [
            (worker, request_id)
            for worker, sim in enumerate(matryoshka.sims)
            for request_id in sim.records.aborted
            if request_id.startswith(prefix)
        ]

    try:
        body = json.dumps({"model": MODEL, "input": ["a", "b", "c", "d"]}).encode()
        head = (
            "POST /v1/embeddings HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            f"X-Request-Id: {prefix}1\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        with socket.create_connection(("127.0.0.1", matryoshka.port), timeout=10) as sock:
            sock.sendall(head.encode() + body)
            # Leave once every input's call waits on a worker.
            matryoshka.wait_until(lambda: len(calls()) == 4)
        sent = calls()
        # Each call is aborted, once, on the worker that has it.
        matryoshka.wait_until(lambda: sent <= set(aborted()))
        assert sorted(aborted()) == sorted(sent)
    finally:
        for sim in matryoshka.sims:
            sim.knobs.update({"hang": False})
    answer = httpx.post(
        f"{matryoshka.base_url}/v1/embeddings", json={"model": MODEL, "input": "x"}, timeout=30
    )
    assert answer.status_code == 200
    workers = httpx.get(f"{matryoshka.base_url}/workers", timeout=10).json()
    assert all(w["in_flight"] == 0 for w in workers["workers"]), workers


def test_embeddings_wait_for_admission_like_generation(tmp_path: Path) -> None:
    """The route is under admission control: with one permit, a second request waits."""
    with run_router(
        sims=1, config={"server": {"max_concurrent_requests": 1, "queue_size": 4}}
    ) as router:
        router.sims[0].knobs.update({"ttft_ms": 600})
        results: list[int] = []

        def post() -> None:
            body = {"model": MODEL, "input": "x"}
            results.append(
                httpx.post(f"{router.base_url}/v1/embeddings", json=body, timeout=30).status_code
            )

        threads = [threading.Thread(target=post) for _ in range(2)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [200, 200]
        assert time.monotonic() - started >= 1.1  # one after the other
