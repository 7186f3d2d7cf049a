"""``turnout sim --engine vllm|trtllm`` through turnout's own client: the same simulated model
behind each protocol (answers, aborts, health, loads, embeddings), and its command line."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from tests.wire._helpers import fold, request
from turnout.sim import SimProcess, SimWorker
from turnout.sim.cli import main
from turnout.wire import WorkerCallError, WorkerClient, pb

from .conftest import ENGINES


@pytest.mark.parametrize("engine", ENGINES)
async def test_the_same_answer_in_every_protocol(engine: str) -> None:
    async with SimWorker(port=0) as sglang, SimWorker(port=0, engine=engine) as other:  # type: ignore[arg-type]
        assert other.url.startswith(f"{engine}+grpc://")
        answers = []
        for sim in (sglang, other):
            async with WorkerClient(sim.url) as client:
                folded = await fold(client.generate(request("Hello engines", n=2)))
                answers.append(
                    ({i: folded.text(i) for i in (0, 1)}, folded.completes[0].finish_reason)
                )
        assert answers[0] == answers[1]
        assert [r.request_id for r in other.requests] == ["req-1"]  # SGLang's shape, recorded


@pytest.mark.parametrize("engine", ENGINES)
async def test_abort_health_loads_and_embeddings(engine: str) -> None:
    async with (
        SimWorker(port=0, engine=engine, delay_ms=20) as sim,  # type: ignore[arg-type]
        WorkerClient(sim.url) as client,
    ):
        stream = client.generate(request("a long answer " * 20, request_id="slow-1"))
        first = await stream.next_batch()
        assert first
        await client.abort("slow-1")
        rest = []
        while batch := await stream.next_batch():
            rest += batch
        assert rest[-1].complete.finish_reason == "abort"
        assert sim.aborted == ["slow-1"]
        assert (await client.health_check()).healthy
        sim.knobs.update({"unhealthy": True})
        assert not (await client.health_check()).healthy
        if engine == "vllm":
            loads = await client.get_loads()
            assert loads.dp_rank_count == 1
        else:
            with pytest.raises(WorkerCallError) as missing:
                await client.get_loads()
            assert missing.value.code is grpc.StatusCode.UNIMPLEMENTED
        asked = pb.EmbedRequest(request_id="e1")
        asked.tokenized.input_ids.extend([5, 6, 7])
        answer = await client.embed(asked)
        assert (answer.prompt_tokens, answer.embedding_dim) == (3, len(answer.embedding))


async def test_the_process_prints_the_engines_scheme() -> None:
    with SimProcess("--engine", "trtllm") as sim:
        assert sim.url.startswith("trtllm+grpc://127.0.0.1:")
        async with WorkerClient(sim.url) as client:
            info = await asyncio.wait_for(client.get_model_info(), 10)
            assert info.served_model_name == "turnout-demo"


def test_pd_roles_stay_sglangs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--engine", "vllm", "--role", "prefill", "--port", "0"]) == 2
    assert "--engine sglang" in capsys.readouterr().err
