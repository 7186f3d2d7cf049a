"""LoRA adapters end to end: ``model: "<model>:<adapter>"`` through the official client reaches
each simulated worker with that worker's own ``lora_id`` for the adapter; ``/v1/models`` lists
the adapters; an unknown adapter is a 404; only workers with the adapter loaded get its
requests, and the load policies keep an adapter's requests on the worker that served it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from turnout.sim import SimWorker
from turnout.sim.lora import SimAdapters

from .harness import MODEL, Router, run_router


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with run_router(
        sims=2,
        sim_kwargs={"lora_adapters": ["sql=/adapters/sql", "poet"]},
        model={"adapters": ["configured"]},
        config={"defaults": {"policy": "round_robin"}},
    ) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)


def _lora_id_of(sim: SimWorker, name: str) -> str:
    return sim.servicer.adapters.by_name[name].lora_id


def _served_with(router: Router, request_id: str) -> list[tuple[int, str]]:
    """(sim index, lora_id) of every sim that received a request whose id starts so."""
    return [
        (i, lora_id)
        for i, sim in enumerate(router.sims)
        for rid, lora_id in sim.records.lora_ids.items()
        if rid.startswith(request_id)
    ]


def test_chat_with_an_adapter_reaches_the_worker_with_its_lora_id(
    router: Router, client: openai.OpenAI
) -> None:
    ids = {_lora_id_of(sim, "sql") for sim in router.sims}
    assert len(ids) == 2  # each worker minted its own id: the router must ask each one
    seen: set[int] = set()
    for _ in range(4):  # round robin: both workers
        answer = client.chat.completions.create(
            model=f"{MODEL}:sql", messages=[{"role": "user", "content": "hello there"}]
        )
        assert answer.model == MODEL
        [(sim_index, lora_id)] = _served_with(router, answer.id)
        assert lora_id == _lora_id_of(router.sims[sim_index], "sql")
        seen.add(sim_index)
    assert seen == {0, 1}


def test_streamed_completion_with_an_adapter(router: Router, client: openai.OpenAI) -> None:
    stream = client.completions.create(model=f"{MODEL}:poet", prompt="roses are", stream=True)
    chunk_ids = {chunk.id for chunk in stream}
    [request_id] = chunk_ids
    [(sim_index, lora_id)] = _served_with(router, request_id)
    assert lora_id == _lora_id_of(router.sims[sim_index], "poet")


def test_base_model_requests_carry_no_lora_id(router: Router, client: openai.OpenAI) -> None:
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "plain"}]
    )
    assert _served_with(router, answer.id) == []
    assert any(r.request_id == answer.id and not r.lora_id for s in router.sims for r in s.requests)


def test_sglang_lora_path_names_the_adapter(router: Router) -> None:
    body = {"text": "hello", "lora_path": "sql", "rid": "lora-path-1"}
    answer = httpx.post(f"{router.base_url}/generate", json=body, timeout=20)
    assert answer.status_code == 200, answer.text
    [(sim_index, lora_id)] = _served_with(router, "lora-path-1")
    assert lora_id == _lora_id_of(router.sims[sim_index], "sql")
    clash = {"model": f"{MODEL}:poet", "prompt": "x", "lora_path": "sql"}
    answer = httpx.post(f"{router.base_url}/v1/completions", json=clash, timeout=20)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "lora_path"


def test_models_lists_the_adapters(router: Router, client: openai.OpenAI) -> None:
    cards = {m.id: m.model_dump() for m in client.models.list()}
    assert set(cards) == {MODEL, f"{MODEL}:configured", f"{MODEL}:poet", f"{MODEL}:sql"}
    sql = cards[f"{MODEL}:sql"]
    assert sql["parent"] == MODEL
    assert sql["root"] == "/adapters/sql"
    assert cards[f"{MODEL}:configured"]["parent"] == MODEL
    assert "parent" not in cards[MODEL]
    assert client.models.retrieve(f"{MODEL}:poet").model_dump()["parent"] == MODEL


def test_an_unknown_adapter_is_404_like_an_unknown_model(
    router: Router, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(
            model=f"{MODEL}:nope", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.code == "model_not_found"
    assert "nope" in caught.value.message
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve(f"{MODEL}:nope")


def test_an_adapter_no_worker_has_loaded_is_503(router: Router, client: openai.OpenAI) -> None:
    """Configured, but both workers list their adapters and neither has it."""
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model=f"{MODEL}:configured", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 503
    assert "without LoRA adapter 'configured'" in caught.value.message


def test_only_workers_with_the_adapter_get_its_requests() -> None:
    """An adapter loaded on one worker later (the router re-reads the list on its health
    probes) gets all of its requests, whatever the policy would do otherwise."""
    with run_router(
        sims=2,
        sim_kwargs={"lora_adapters": ["sql"]},
        config={"defaults": {"policy": "round_robin"}},
    ) as router:
        router.sims[1].servicer.adapters = SimAdapters(["sql", "late"])
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)
        router.wait_until(
            lambda: f"{MODEL}:late" in {m.id for m in client.models.list()}, timeout=10
        )
        for _ in range(4):
            answer = client.chat.completions.create(
                model=f"{MODEL}:late", messages=[{"role": "user", "content": "hi"}]
            )
            [(sim_index, lora_id)] = _served_with(router, answer.id)
            assert sim_index == 1
            assert lora_id == _lora_id_of(router.sims[1], "late")


def test_workers_without_the_listing_rpc_name_adapters_in_their_server_args() -> None:
    """Older SGLang: ListLoadedLoRAAdapters is UNIMPLEMENTED; GetServerInfo's lora_paths
    (``LoRARef(...)`` records) give the ids."""
    with run_router(
        sims=1, sim_kwargs={"lora_adapters": ["sql"], "lists_adapters": False}
    ) as router:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)
        answer = client.chat.completions.create(
            model=f"{MODEL}:sql", messages=[{"role": "user", "content": "hi"}]
        )
        [(_, lora_id)] = _served_with(router, answer.id)
        assert lora_id == _lora_id_of(router.sims[0], "sql")


def test_least_load_keeps_an_adapter_on_the_worker_that_served_it() -> None:
    """Sequential requests (equal loads): without an adapter least_load takes the workers in
    turn; an adapter's requests stay on the worker that served it first."""
    with run_router(
        sims=2,
        sim_kwargs={"lora_adapters": ["sql"]},
        config={"defaults": {"policy": "least_load"}},
    ) as router:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)

        def sims_of(model: str) -> set[int]:
            used = set()
            for _ in range(6):
                answer = client.completions.create(model=model, prompt="x", max_tokens=2)
                used |= {
                    i
                    for i, sim in enumerate(router.sims)
                    for r in sim.requests
                    if r.request_id == answer.id
                }
            return used

        assert sims_of(MODEL) == {0, 1}
        assert len(sims_of(f"{MODEL}:sql")) == 1


def test_a_prefill_decode_pair_gets_each_workers_own_lora_id() -> None:
    """Both legs of a PD pair run the adapter, each named by its own worker's lora_id (the
    legs are otherwise the same request)."""
    with run_router(
        roles=["prefill", "decode"],
        sim_kwargs={"lora_adapters": ["sql"], "bootstrap_timeout_s": 20.0},
    ) as router:
        client = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="x", max_retries=0)
        for stream in (False, True):
            answer = client.chat.completions.create(
                model=f"{MODEL}:sql",
                messages=[{"role": "user", "content": "hi"}],
                stream=stream,
                extra_headers={"x-request-id": f"pd-lora-{stream}"},
            )
            if stream:
                assert list(answer)
            served = _served_with(router, f"pd-lora-{stream}")
            assert sorted(i for i, _ in served) == [0, 1]  # both legs
            for sim_index, lora_id in served:
                assert lora_id == _lora_id_of(router.sims[sim_index], "sql")
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(
                model=f"{MODEL}:nope", messages=[{"role": "user", "content": "hi"}]
            )
