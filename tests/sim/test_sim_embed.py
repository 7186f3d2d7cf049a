"""The simulator's Embed RPC over a real socket: deterministic unit vectors of the hidden size."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import grpc
import pytest

from turnout import demo_model
from turnout.sim import SimWorker, get_records
from turnout.sim.embedding import DEFAULT_EMBEDDING_DIM, embed_ids, embedding_dim
from turnout.wire import WorkerCallError, WorkerClient, pb


def embed_request(ids: list[int], request_id: str = "e") -> pb.EmbedRequest:
    return pb.EmbedRequest(request_id=request_id, tokenized=pb.TokenizedInput(input_ids=ids))


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_embed_is_a_deterministic_unit_vector(sim: SimWorker, client: WorkerClient) -> None:
    a = await client.embed(embed_request([5, 6, 7]))
    b = await client.embed(embed_request([5, 6, 7], "e2"))
    assert a.embedding_dim == len(a.embedding) == DEFAULT_EMBEDDING_DIM  # the demo has no size
    assert list(a.embedding) == list(b.embedding)
    assert abs(sum(v * v for v in a.embedding) - 1) < 1e-5
    assert a.prompt_tokens == 3
    # the documented function, recomputed here (float32 on the wire)
    assert list(a.embedding) == pytest.approx(embed_ids([5, 6, 7], DEFAULT_EMBEDDING_DIM), abs=1e-6)
    assert [r.request_id for r in sim.records.embed_requests] == ["e", "e2"]
    assert (await get_records(sim.url))["embeds"] == ["e", "e2"]


async def test_similar_prompts_get_closer_vectors(client: WorkerClient) -> None:
    base = list(range(100, 140))
    near = [*base[:36], 7, 8, 9, 10]  # 36 of 40 tokens shared
    far = list(range(900, 940))
    v_base, v_near, v_far = [
        list((await client.embed(embed_request(ids))).embedding) for ids in (base, near, far)
    ]
    assert cosine(v_base, v_near) > 0.8
    assert abs(cosine(v_base, v_far)) < 0.5
    assert v_base != v_near


async def test_empty_input_is_invalid(client: WorkerClient) -> None:
    with pytest.raises(WorkerCallError) as info:
        await client.embed(embed_request([]))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


async def test_dimension_is_the_models_hidden_size(tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(demo_model.path(), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "hidden_size": 96}))
    async with SimWorker(model, port=0) as sim, WorkerClient(sim.url) as client:
        answer = await client.embed(embed_request(list(range(1, 600))))
    assert answer.embedding_dim == len(answer.embedding) == 96
    assert math.isclose(sum(v * v for v in answer.embedding), 1, abs_tol=1e-5)


def test_embedding_dim_reads_the_config() -> None:
    assert embedding_dim({"hidden_size": 4096}) == 4096
    assert embedding_dim({"text_config": {"hidden_size": 3584}, "vision_config": {}}) == 3584
    assert embedding_dim({"hidden_size": True}) == DEFAULT_EMBEDDING_DIM
    assert embedding_dim({}) == DEFAULT_EMBEDDING_DIM


def test_embed_ids_counts_repeated_tokens() -> None:
    once = embed_ids([3, 4], 32)
    assert embed_ids([4, 3], 32) == once  # mean pooling: order does not matter
    assert embed_ids([3, 3, 4], 32) != once
    with pytest.raises(ValueError, match="at least one token"):
        embed_ids([], 32)


async def test_out_of_vocabulary_ids_are_invalid_as_in_generate(client: WorkerClient) -> None:
    with pytest.raises(WorkerCallError) as info:
        await client.embed(embed_request([5, 10**9]))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "out of range" in str(info.value)
