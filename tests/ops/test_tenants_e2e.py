"""Tenants over real HTTP with budgets in memory (one process): keys name the tenant, models it
may not use are 404, requests and tokens over its limits get 429 with OpenAI's headers, token
reservations settle to the real usage (also when the client leaves), concurrency, metrics, the
access log, and reloads."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.server.harness import MODEL, Router, free_port, run_router
from tests.support import bearer, eventually
from turnout.demo_model import path as demo_path

from .helpers import chat, fresh_window, scrape, value

CHAT = "/v1/chat/completions"
#: Budgets are counted in windows of this many seconds (limits.window_s): a per-minute limit of
#: 3 * N is N per window.
WINDOW_S = 20
ADMIN = "admin-key"
PLAIN = "plain-key"
KEYS = {
    name: f"key-of-{name}"
    for name in (
        "ident",
        "blocked",
        "alias",
        "rpm",
        "tpm",
        "leave",
        "conc",
        "rot",
        "emb",
        "outage",
        "emb_outage",
    )
}


def per_minute(per_window: int) -> int:
    return per_window * 60 // WINDOW_S


TENANTS: dict[str, Any] = {
    "ident": {"keys": [KEYS["ident"]], "models": ["turnout-*"]},
    "blocked": {"keys": [KEYS["blocked"]], "models": ["elsewhere/*"]},
    "alias": {
        "key_sha256": [hashlib.sha256(KEYS["alias"].encode()).hexdigest()],
        "models": ["demo-alias"],
    },
    "rpm": {"keys": [KEYS["rpm"]], "requests_per_minute": per_minute(2)},
    "tpm": {"keys": [KEYS["tpm"]], "tokens_per_minute": per_minute(300)},
    "leave": {"keys": [KEYS["leave"]], "tokens_per_minute": per_minute(300)},
    "conc": {"keys": [KEYS["conc"]], "concurrent_requests": 1},
    "emb": {"keys": [KEYS["emb"]], "tokens_per_minute": per_minute(50)},
    "outage": {"keys": [KEYS["outage"]], "tokens_per_minute": per_minute(300)},
    "emb_outage": {"keys": [KEYS["emb_outage"]], "tokens_per_minute": per_minute(50)},
}


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def router(metrics_port: int) -> Iterator[Router]:
    config = {
        "server": {"api_keys": [PLAIN], "admin_api_key": ADMIN, "metrics_port": metrics_port},
        "tenants": TENANTS,
        "limits": {"window_s": WINDOW_S},
    }
    with run_router(config=config, sims=1, model={"aliases": ["demo-alias"]}) as running:
        yield running


@pytest.fixture(autouse=True)
def reset_knobs(router: Router) -> Iterator[None]:
    yield
    router.sims[0].knobs.update({"delay_ms": 0.0})


@pytest.fixture
async def client(router: Router) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=router.base_url, timeout=30) as http:
        yield http


def post(router: Router, key: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{router.base_url}{CHAT}", json=body, headers=bearer(key), timeout=30)


async def stream_until(
    client: httpx.AsyncClient, key: str, body: dict[str, Any], started: asyncio.Event, chunks: int
) -> int:
    """Stream a chat; set ``started`` after ``chunks`` events; return the events read (the
    stream is read to its end unless the caller cancels)."""
    seen = 0
    async with client.stream("POST", CHAT, json=body, headers=bearer(key)) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                seen += 1
                if seen >= chunks:
                    started.set()
    return seen


async def eventually_ok(
    client: httpx.AsyncClient, key: str, body: dict[str, Any], path: str = CHAT
) -> None:
    """The request succeeds within a few seconds (budgets are given back in the background)."""

    async def served() -> bool:
        answer = await client.post(path, json=body, headers=bearer(key))
        assert answer.status_code in (200, 429), answer.text
        return answer.status_code == 200

    await eventually(served, within=5, what=f"a 200 for {key}", every=0.05)


# -- identification and models -----------------------------------------------------------------


def test_tenant_keys_serve_and_never_open_admin_routes(router: Router) -> None:
    assert post(router, KEYS["ident"], chat()).status_code == 200
    assert post(router, PLAIN, chat()).status_code == 200
    assert post(router, "not-a-key", chat()).status_code == 401
    workers = f"{router.base_url}/workers"
    assert httpx.get(workers, headers=bearer(KEYS["ident"]), timeout=10).status_code == 401
    assert httpx.get(workers, headers=bearer(ADMIN), timeout=10).status_code == 200


def test_a_model_the_tenant_may_not_use_is_not_served_for_it(router: Router) -> None:
    headers = bearer(KEYS["blocked"])
    models = httpx.get(f"{router.base_url}/v1/models", headers=headers, timeout=10)
    assert models.status_code == 200
    assert models.json()["data"] == []
    one = httpx.get(f"{router.base_url}/v1/models/{MODEL}", headers=headers, timeout=10)
    assert one.status_code == 404
    before = len(router.sims[0].requests)
    refused = post(router, KEYS["blocked"], chat())
    assert refused.status_code == 404, refused.text
    error = refused.json()["error"]
    assert error["code"] == "model_not_found"
    assert error["type"] == "not_found_error"
    # The same answer as for a model nobody serves: the message lists no model.
    unknown = post(router, PLAIN, {**chat(), "model": "nobody/serves-this"}).json()["error"]
    assert error["message"].split(";")[1] == unknown["message"].split(";")[1].replace(MODEL, "none")
    assert len(router.sims[0].requests) == before
    # Others still see it.
    listed = httpx.get(f"{router.base_url}/v1/models", headers=bearer(PLAIN), timeout=10)
    assert [m["id"] for m in listed.json()["data"]] == [MODEL]


def test_metrics_without_the_admin_key_name_no_tenant_and_no_hidden_model(
    router: Router, metrics_port: int
) -> None:
    assert post(router, KEYS["ident"], chat()).status_code == 200
    full = scrape(router.base_url, **bearer(ADMIN))
    assert any(("tenant", "ident") in labels for _, labels in full)
    assert any(("model", MODEL) in labels for _, labels in full)
    # "blocked" is told the model does not exist: a scrape without the admin key (public, or
    # with a serving key, or on the metrics port) shows neither the tenants nor that model.
    scrapes = [(router.base_url, {}), (router.base_url, bearer(PLAIN))]
    scrapes += [(router.base_url, bearer(KEYS["ident"])), (f"http://127.0.0.1:{metrics_port}", {})]
    for base_url, headers in scrapes:
        public = scrape(base_url, **headers)
        assert public, "the rest is still there"
        assert not any(name == "tenant" for _, labels in public for name, _ in labels)
        assert not any(("model", MODEL) in labels for _, labels in public)


def test_worker_info_shows_file_paths_to_the_admin_key_only(router: Router) -> None:
    for route in ("/get_model_info", "/get_server_info"):
        plain = httpx.get(f"{router.base_url}{route}", headers=bearer(PLAIN), timeout=10)
        assert plain.status_code == 200, plain.text
        assert str(demo_path()) not in plain.text
        admin = httpx.get(f"{router.base_url}{route}", headers=bearer(ADMIN), timeout=10)
        assert str(demo_path()) in admin.text
    info = httpx.get(f"{router.base_url}/get_model_info", headers=bearer(PLAIN), timeout=10)
    assert info.json()["model_path"] == demo_path().name  # still names the model


def test_models_are_matched_by_alias_and_glob(router: Router) -> None:
    assert post(router, KEYS["alias"], {**chat(), "model": "demo-alias"}).status_code == 200
    assert post(router, KEYS["alias"], chat()).status_code == 200  # the same model by its id
    assert post(router, KEYS["ident"], chat()).status_code == 200  # turnout-*


def test_a_glob_matches_a_model_the_workers_serve_that_the_config_does_not_list() -> None:
    # No `models:` entry: the model id comes from the workers (the tokenizer from the defaults).
    tenants = {
        "glob": {"keys": [KEYS["ident"]], "models": ["turnout-*"]},
        "blocked": {"keys": [KEYS["blocked"]], "models": ["elsewhere/*"]},
    }
    with run_router(config={"tenants": tenants}, sims=1, discover_model=True) as running:
        listed = httpx.get(
            f"{running.base_url}/v1/models", headers=bearer(KEYS["ident"]), timeout=10
        )
        assert [m["id"] for m in listed.json()["data"]] == [MODEL]
        assert post(running, KEYS["ident"], chat()).status_code == 200
        assert post(running, KEYS["blocked"], chat()).status_code == 404


# -- requests per minute -----------------------------------------------------------------------


def test_requests_over_the_limit_get_429_with_openai_headers(router: Router) -> None:
    fresh_window(WINDOW_S)
    for _ in range(2):
        assert post(router, KEYS["rpm"], chat()).status_code == 200
    refused = post(router, KEYS["rpm"], chat())
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error"
    assert error["code"] == "rate_limit_exceeded"
    assert "'rpm'" in error["message"]
    headers = refused.headers
    assert headers["x-ratelimit-limit-requests"] == "2"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"].endswith("s")
    retry_after = int(headers["retry-after"])
    assert 1 <= retry_after <= 2 * WINDOW_S
    assert 0 < int(headers["retry-after-ms"]) <= retry_after * 1000
    # Other tenants and untenanted keys are not affected.
    assert post(router, PLAIN, chat()).status_code == 200
    assert post(router, KEYS["ident"], chat()).status_code == 200
    samples = scrape(router.base_url, **bearer(ADMIN))
    assert value(samples, "turnout_tenant_rejected_total", tenant="rpm", limit="requests") == 1
    assert value(samples, "turnout_tenant_requests_total", tenant="rpm", status="429") == 1
    assert value(samples, "turnout_tenant_requests_total", tenant="rpm", status="200") == 2


# -- tokens ------------------------------------------------------------------------------------


async def test_token_reservations_block_concurrent_long_answers_until_they_settle(
    router: Router, client: httpx.AsyncClient
) -> None:
    """Each request reserves prompt + max_tokens (28 + 200) of a 300-token window: a second
    one does not fit while the first runs, and fits once the first settled to its real use
    (28 + 21)."""
    fresh_window(WINDOW_S)
    router.sims[0].knobs.update({"delay_ms": 500.0})  # the first answer runs while we ask
    text = " ".join(["word"] * 20)
    body = chat(text, stream=True, max_tokens=200)
    started = asyncio.Event()
    first = asyncio.create_task(stream_until(client, KEYS["tpm"], body, started, 1))
    await asyncio.wait_for(started.wait(), 10)
    second = chat(text, max_tokens=200)
    refused = await client.post(CHAT, json=second, headers=bearer(KEYS["tpm"]))
    router.sims[0].knobs.update({"delay_ms": 0.0})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert refused.headers["x-ratelimit-limit-tokens"] == "300"
    assert int(refused.headers["x-ratelimit-remaining-tokens"]) == 300 - 228
    assert "x-ratelimit-limit-requests" not in refused.headers  # it has no request limit
    await first
    await eventually_ok(client, KEYS["tpm"], second)
    samples = scrape(router.base_url, **bearer(ADMIN))
    assert value(samples, "turnout_tenant_rejected_total", tenant="tpm", limit="tokens") >= 1
    assert value(samples, "turnout_tenant_tokens_total", tenant="tpm", kind="prompt") >= 18
    assert value(samples, "turnout_tenant_tokens_total", tenant="tpm", kind="completion") >= 4


def test_a_request_larger_than_the_whole_budget_is_not_retried(router: Router) -> None:
    refused = post(router, KEYS["tpm"], chat("hi", max_tokens=400))
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "request_too_large_for_limit"
    assert refused.headers["x-should-retry"] == "false"
    assert "retry-after" not in refused.headers


def test_embeddings_count_their_input_tokens_and_models(router: Router) -> None:
    """An embedding reserves its input tokens (it generates none): 30 of a 50-token window
    fit once, not twice; more than the window is too large; a hidden model is not served."""
    fresh_window(WINDOW_S)

    def embed(key: str, ids: list[int], model: str = MODEL) -> httpx.Response:
        body = {"model": model, "input": ids}
        url = f"{router.base_url}/v1/embeddings"
        return httpx.post(url, json=body, headers=bearer(key), timeout=30)

    too_large = embed(KEYS["emb"], [5] * 60)
    assert too_large.status_code == 429, too_large.text
    assert too_large.json()["error"]["code"] == "request_too_large_for_limit"
    assert embed(KEYS["emb"], [5] * 30).status_code == 200
    refused = embed(KEYS["emb"], [5] * 30)
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["x-ratelimit-remaining-tokens"]) == 20
    assert embed(KEYS["blocked"], [5]).status_code == 404


async def test_a_client_leaving_settles_its_reservation_to_what_was_generated(
    router: Router, client: httpx.AsyncClient
) -> None:
    """88 prompt + 100 reserved; the client leaves after a few tokens: the reservation settles
    to ~90, so the same request fits again (it would not if 188 stayed taken)."""
    fresh_window(WINDOW_S)
    router.sims[0].knobs.update({"delay_ms": 100.0})
    body = chat(" ".join(["word"] * 80), stream=True, max_tokens=100)
    started = asyncio.Event()
    leaving = asyncio.create_task(stream_until(client, KEYS["leave"], body, started, 3))
    await asyncio.wait_for(started.wait(), 10)
    leaving.cancel()  # the client goes away mid-answer
    with pytest.raises(asyncio.CancelledError):
        await leaving
    router.sims[0].knobs.update({"delay_ms": 0.0})
    await eventually_ok(client, KEYS["leave"], {**body, "stream": False})


async def test_a_request_no_worker_served_gives_back_its_whole_reservation(
    router: Router, client: httpx.AsyncClient
) -> None:
    """28 + 200 of a 300-token window reserved, then the worker fails before answering: the
    reservation is given back whole, so the same request fits again at once (it would not
    for the rest of the window if a worker outage kept what its requests reserved)."""
    fresh_window(WINDOW_S, need_s=8)
    body = chat(" ".join(["word"] * 20), max_tokens=200)
    router.sims[0].knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
    try:
        failed = await client.post(CHAT, json=body, headers=bearer(KEYS["outage"]))
    finally:
        router.sims[0].knobs.update({"fail_status": None, "fault_budget": None})
    assert failed.status_code >= 500, failed.text
    await eventually_ok(client, KEYS["outage"], body)


async def test_an_embedding_no_worker_served_gives_back_its_input_tokens(
    router: Router, client: httpx.AsyncClient
) -> None:
    """The same for an embedding: 30 input tokens of a 50-token window, the worker fails, and
    30 fit again at once."""
    fresh_window(WINDOW_S, need_s=8)
    body = {"model": MODEL, "input": [5] * 30}
    router.sims[0].knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
    try:
        failed = await client.post("/v1/embeddings", json=body, headers=bearer(KEYS["emb_outage"]))
    finally:
        router.sims[0].knobs.update({"fail_status": None, "fault_budget": None})
    assert failed.status_code >= 500, failed.text
    await eventually_ok(client, KEYS["emb_outage"], body, "/v1/embeddings")


# -- concurrency -------------------------------------------------------------------------------


async def test_concurrent_requests_over_the_limit_get_429(
    router: Router, client: httpx.AsyncClient
) -> None:
    router.sims[0].knobs.update({"delay_ms": 500.0})  # the first answer runs while we ask
    started = asyncio.Event()
    body = chat(" ".join(["word"] * 20), stream=True)
    running = asyncio.create_task(stream_until(client, KEYS["conc"], body, started, 1))
    await asyncio.wait_for(started.wait(), 10)
    refused = await client.post(CHAT, json=chat(), headers=bearer(KEYS["conc"]))
    router.sims[0].knobs.update({"delay_ms": 0.0})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "concurrency_limit_exceeded"
    assert refused.headers["retry-after"] == "1"
    await running
    await eventually_ok(client, KEYS["conc"], chat())
    samples = scrape(router.base_url, **bearer(ADMIN))
    assert value(samples, "turnout_tenant_rejected_total", tenant="conc", limit="concurrency") >= 1


# -- logs --------------------------------------------------------------------------------------


def test_the_access_log_names_the_tenant_never_its_key(
    router: Router, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="turnout.access")
    assert post(router, KEYS["ident"], chat()).status_code == 200
    router.wait_until(lambda: any("tenant=ident" in r.getMessage() for r in caplog.records))
    line = next(r for r in caplog.records if "tenant=ident" in r.getMessage())
    assert line.fields["tenant"] == "ident"  # type: ignore[attr-defined]
    for record in caplog.records:
        text = record.getMessage() + repr(getattr(record, "fields", ""))
        assert not any(key in text for key in KEYS.values())


# -- reload ------------------------------------------------------------------------------------

ROTATED: dict[str, Any] = {}


def rotate(data: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["tenants"] = ROTATED
    return data


@pytest.fixture(scope="module")
def reloading() -> Iterator[Router]:
    config = {
        "server": {"admin_api_key": ADMIN},
        "tenants": {"rot": {"keys": ["old-key"]}},
    }
    with run_router(config=config, sims=1, reload_data=rotate) as running:
        yield running


def reload(router: Router) -> None:
    answer = httpx.post(f"{router.base_url}/admin/reload", headers=bearer(ADMIN), timeout=30)
    assert answer.status_code == 200, answer.text


def test_reload_rotates_tenant_keys_and_applies_new_limits(reloading: Router) -> None:
    assert post(reloading, "old-key", chat()).status_code == 200
    for _ in range(3):  # no limits yet
        assert post(reloading, "old-key", chat()).status_code == 200
    ROTATED.clear()
    ROTATED.update({"rot": {"keys": ["new-key"], "requests_per_minute": 1}})
    reload(reloading)
    assert post(reloading, "old-key", chat()).status_code == 401
    assert post(reloading, "new-key", chat()).status_code == 200
    refused = post(reloading, "new-key", chat())
    assert refused.status_code == 429, refused.text
    assert refused.headers["x-ratelimit-limit-requests"] == "1"
    samples = scrape(reloading.base_url, **bearer(ADMIN))
    assert value(samples, "turnout_tenant_requests_total", tenant="rot", status="200") == 5
