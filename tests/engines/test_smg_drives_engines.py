"""smg drives the vLLM- and TensorRT-LLM-protocol sims as real peers: it finds the engine on
a plain ``grpc://`` URL itself, and serves chat (whole, streamed, with logprobs and n > 1)
from them, subscribing to their KV events for its cache-aware policy."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import openai
import pytest

from bench.services import Router, find_smg, start_smg
from tests.support import eventually
from turnout.sim import SimProcess
from turnout.sim.worker import get_records

from .conftest import ENGINES

pytestmark = [
    pytest.mark.slow,  # an smg process and a sim process per engine
    pytest.mark.skipif(find_smg() is None, reason="smg is not installed (pip install smg)"),
]


@pytest.fixture(scope="module", params=ENGINES)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SimProcess, Router]]:
    """A sim speaking the engine's protocol, and smg in front of it."""
    command = find_smg()
    assert command is not None
    with SimProcess("--engine", request.param, "--delay-ms", "2") as sim:
        plain = "grpc://" + sim.url.split("://", 1)[1]  # smg tells the engine by itself
        router = start_smg(
            [plain], tmp_path_factory.mktemp("smg"), policy="cache_aware", command=command
        )
        try:
            yield sim, router
        finally:
            router.stop()


def _client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)


def test_smg_serves_chat_from_the_engine_sim(served: tuple[SimProcess, Router]) -> None:
    sim, router = served
    client = _client(router)
    messages = [{"role": "user", "content": "hello there friend"}]
    reply = client.chat.completions.create(model="turnout-demo", messages=messages)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == "hello there friend"
    assert reply.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model="turnout-demo",
        messages=messages,  # type: ignore[arg-type]
        stream=True,
    )
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == "hello there friend"
    records = asyncio.run(get_records(sim.url))
    assert len(records["requests"]) >= 2
    assert set(records["outcomes"].values()) == {"stop"}


def test_smg_gets_logprobs_and_several_choices(served: tuple[SimProcess, Router]) -> None:
    _sim, router = served
    reply = _client(router).chat.completions.create(
        model="turnout-demo",
        messages=[{"role": "user", "content": "score these words"}],
        logprobs=True,
        top_logprobs=2,
        n=2,
        max_tokens=6,
    )
    assert len(reply.choices) == 2
    for choice in reply.choices:
        assert choice.logprobs is not None
        assert choice.logprobs.content
        assert all(e.logprob <= 0 and len(e.top_logprobs) == 2 for e in choice.logprobs.content)


async def test_smg_subscribes_to_the_engine_sims_kv_events(
    served: tuple[SimProcess, Router],
) -> None:
    sim, _router = served

    async def subscribed() -> bool:
        return bool((await get_records(sim.url))["kv_subscriptions"])

    await eventually(subscribed, within=20, what="smg subscribed to the KV events")
