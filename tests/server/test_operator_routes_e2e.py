"""Operator routes end to end (router + two sims over real sockets, for both sim server
transports): a LoRA adapter loaded at run time is routable at once and a 404 after its
unload; cache flush and profiler reach every worker; the admin key guards them all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from .harness import MODEL, Router, run_router

ADMIN = {"authorization": "Bearer admin-key"}


@pytest.fixture(scope="module", params=["grpcio", "native"])
def router(request: pytest.FixtureRequest) -> Iterator[Router]:
    config = {
        "server": {"api_keys": ["serve-key"], "admin_api_key": "admin-key"},
        # Long probe interval: "routable at once" must not come from a periodic refresh.
        "health": {"interval_s": 60, "pending_interval_s": 0.1, "timeout_s": 2},
        "defaults": {"policy": "round_robin"},
    }
    with run_router(config, sims=2, sim_kwargs={"transport": request.param}) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="serve-key", max_retries=0)


def _post(router: Router, path: str, body: Any = None, headers: Any = None) -> httpx.Response:
    return httpx.post(
        router.base_url + path,
        json=body,
        headers=ADMIN if headers is None else headers,
        timeout=30,
    )


def _chat(client: openai.OpenAI, model: str) -> str:
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "hello there"}]
    )
    return answer.id


def test_lora_load_is_routable_at_once_and_404_after_unload(
    router: Router, client: openai.OpenAI
) -> None:
    with pytest.raises(openai.NotFoundError):
        _chat(client, f"{MODEL}:fresh")

    loaded = _post(
        router,
        "/admin/load_lora_adapter",
        {"model": MODEL, "lora_name": "fresh", "lora_path": "/adapters/fresh"},
    )
    assert loaded.status_code == 200, loaded.text
    body = loaded.json()
    lora_id = body["lora_id"]
    assert body["model"] == MODEL
    assert sorted(w["success"] for w in body["workers"]) == [True, True]
    for sim in router.sims:
        assert sim.servicer.adapters.by_name["fresh"].lora_id == lora_id

    # Routable at once, on both workers (round robin), with the minted id.
    for _ in range(2):
        request_id = _chat(client, f"{MODEL}:fresh")
        assert [s.records.lora_ids.get(request_id) for s in router.sims].count(lora_id) == 1
    models = httpx.get(f"{router.base_url}/v1/models", headers=ADMIN, timeout=10).json()
    assert f"{MODEL}:fresh" in {m["id"] for m in models["data"]}

    again = _post(
        router,
        "/admin/load_lora_adapter",
        {"model": MODEL, "lora_name": "fresh", "lora_path": "/adapters/fresh"},
    )
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "adapter_exists"

    unloaded = _post(router, "/admin/unload_lora_adapter", {"model": MODEL, "lora_name": "fresh"})
    assert unloaded.status_code == 200, unloaded.text
    assert all("fresh" not in s.servicer.adapters.by_name for s in router.sims)
    with pytest.raises(openai.NotFoundError):
        _chat(client, f"{MODEL}:fresh")

    missing = _post(router, "/admin/unload_lora_adapter", {"model": MODEL, "lora_name": "fresh"})
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "adapter_not_found"


def test_flush_cache_reaches_every_worker(router: Router) -> None:
    before = [s.servicer.cache_flushes for s in router.sims]
    answer = _post(router, "/admin/flush_cache")
    assert answer.status_code == 200, answer.text
    assert [w["message"] for w in answer.json()["workers"]] == ["Cache flushed successfully"] * 2
    assert [s.servicer.cache_flushes for s in router.sims] == [b + 1 for b in before]
    by_model = _post(router, "/admin/flush_cache", {"model": MODEL, "timeout_s": 1})
    assert by_model.status_code == 200


def test_profiler_start_twice_is_refused_then_stopped(router: Router) -> None:
    started = _post(router, "/admin/start_profile", {"output_dir": "/tmp/t", "num_steps": 3})
    assert started.status_code == 200, started.text
    assert all(s.servicer.profiling is not None for s in router.sims)
    assert router.sims[0].servicer.profiling.num_steps == 3  # type: ignore[union-attr]
    twice = _post(router, "/admin/start_profile", {})
    assert twice.status_code == 409
    error = twice.json()["error"]
    assert error["code"] == "worker_refused"
    assert "already in progress" in error["message"]
    stopped = _post(router, "/admin/stop_profile")
    assert stopped.status_code == 200
    assert all(s.servicer.profiling is None for s in router.sims)


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/admin/load_lora_adapter", {"model": MODEL, "lora_name": "x"}, 400, "invalid_value"),
        (
            "/admin/load_lora_adapter",
            {"model": MODEL, "lora_name": "a b", "lora_path": "/p"},
            400,
            "invalid_value",
        ),
        (
            "/admin/load_lora_adapter",
            {"model": "nope", "lora_name": "x", "lora_path": "/p"},
            404,
            "model_not_found",
        ),
        ("/admin/flush_cache", {"timeout_s": -1}, 400, "invalid_value"),
        ("/admin/flush_cache", {"bogus": 1}, 400, "invalid_value"),
        ("/admin/start_profile", {"num_steps": 0}, 400, "invalid_value"),
    ],
)
def test_bad_operator_requests(
    router: Router, path: str, body: Any, status: int, code: str
) -> None:
    answer = _post(router, path, body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code


def test_bad_json_is_a_400(router: Router) -> None:
    answer = httpx.post(
        router.base_url + "/admin/flush_cache", content=b"{not json", headers=ADMIN, timeout=10
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    "path",
    [
        "/admin/load_lora_adapter",
        "/admin/unload_lora_adapter",
        "/admin/flush_cache",
        "/admin/start_profile",
        "/admin/stop_profile",
    ],
)
def test_operator_routes_need_the_admin_key(router: Router, path: str) -> None:
    for headers in ({}, {"authorization": "Bearer serve-key"}):
        answer = _post(router, path, {}, headers=headers)
        assert answer.status_code == 401, answer.text
        assert answer.json()["error"]["code"] == "invalid_api_key"


def test_another_replica_routes_a_loaded_adapter_at_once(router: Router) -> None:
    """A second router over the same workers (a replica, or another serving process) learns of
    an adapter loaded through the first when a request names it, not at its next probe."""
    replica_config = {
        "workers": [{"url": sim.url, "model": MODEL} for sim in router.sims],
        "health": {"interval_s": 60, "pending_interval_s": 0.1, "timeout_s": 2},
    }
    with run_router(replica_config, sims=0) as replica:
        client = openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            _chat(client, f"{MODEL}:shared")
        time.sleep(0.3)  # past the refresh rate limit (the miss above just asked the workers)
        loaded = _post(
            router,
            "/admin/load_lora_adapter",
            {"model": MODEL, "lora_name": "shared", "lora_path": "/adapters/shared"},
        )
        assert loaded.status_code == 200, loaded.text
        try:
            request_id = _chat(client, f"{MODEL}:shared")
            lora_id = loaded.json()["lora_id"]
            assert [s.records.lora_ids.get(request_id) for s in router.sims].count(lora_id) == 1
        finally:
            _post(router, "/admin/unload_lora_adapter", {"model": MODEL, "lora_name": "shared"})
