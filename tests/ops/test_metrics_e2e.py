"""Metrics move as requests flow through a real router with simulated workers; request ids are
echoed on every route and reach the worker and the log lines."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import pytest

from tests.server.harness import MODEL, Router, free_port, run_router
from tests.support import sse_events
from turnout.observability.logs import JsonFormatter, RequestIdFilter

from .helpers import chat, parse_metrics, scrape, total, value

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def router(metrics_port: int) -> Iterator[Router]:
    config = {"defaults": {"policy": "round_robin"}, "server": {"metrics_port": metrics_port}}
    with run_router(config=config) as running:
        yield running


@pytest.fixture(autouse=True)
def healthy_workers(router: Router) -> Iterator[None]:
    yield
    for sim in router.sims:
        sim.knobs.update({"fail_status": None, "fault_budget": None, "delay_ms": 0.0})


def test_request_counters_latency_and_tokens_move(router: Router) -> None:
    before = scrape(router.base_url)
    reply = httpx.post(f"{router.base_url}{CHAT}", json=chat(), timeout=20)
    assert reply.status_code == 200
    usage = reply.json()["usage"]
    streamed = httpx.post(f"{router.base_url}{CHAT}", json=chat(stream=True), timeout=20)
    assert streamed.status_code == 200
    assert sse_events(streamed.text)[-1] == "[DONE]"
    after = scrape(router.base_url)

    labels = {"route": CHAT, "model": MODEL}
    assert value(after, "turnout_requests_total", **labels, status="200") == (
        value(before, "turnout_requests_total", **labels, status="200") + 2
    )
    assert value(after, "turnout_request_duration_seconds_count", **labels) == (
        value(before, "turnout_request_duration_seconds_count", **labels) + 2
    )
    model = {"model": MODEL}
    assert value(after, "turnout_time_to_first_token_seconds_count", **model) == (
        value(before, "turnout_time_to_first_token_seconds_count", **model) + 2
    )
    # The streamed request comes in several chunks: inter-token latency is observed per chunk
    # (the one-shot answer is asked of the worker in one message and has none). How many
    # chunks depends on timing (tokens ready together travel together), at most one a token.
    gaps = value(after, "turnout_inter_token_latency_seconds_count", **model) - value(
        before, "turnout_inter_token_latency_seconds_count", **model
    )
    assert 1 <= gaps <= usage["completion_tokens"] - 1
    assert value(after, "turnout_prompt_tokens_total", **model) == (
        value(before, "turnout_prompt_tokens_total", **model) + 2 * usage["prompt_tokens"]
    )
    assert value(after, "turnout_generation_tokens_total", **model) == (
        value(before, "turnout_generation_tokens_total", **model) + 2 * usage["completion_tokens"]
    )
    assert total(after, "turnout_routed_requests_total", model=MODEL) == (
        total(before, "turnout_routed_requests_total", model=MODEL) + 2
    )
    assert value(after, "turnout_requests_in_flight", route=CHAT) == 0


def test_health_generate_probes_are_not_counted_as_generation(router: Router) -> None:
    """A /health_generate probe runs a real one-token generation, but it is no user request:
    it adds no generated or prompt tokens and no time to first token."""
    before = scrape(router.base_url)
    probe = httpx.get(f"{router.base_url}/health_generate", timeout=30)
    assert probe.status_code == 200
    after = scrape(router.base_url)
    model = {"model": MODEL}
    for name in (
        "turnout_generation_tokens_total",
        "turnout_prompt_tokens_total",
        "turnout_time_to_first_token_seconds_count",
    ):
        assert value(after, name, **model) == value(before, name, **model), name


def test_errors_are_counted_by_status(router: Router) -> None:
    before = scrape(router.base_url)
    missing = httpx.post(f"{router.base_url}{CHAT}", json={**chat(), "model": "nope"}, timeout=20)
    assert missing.status_code == 404
    unknown = httpx.get(f"{router.base_url}/no/such/path", timeout=20)
    assert unknown.status_code == 404
    after = scrape(router.base_url)
    assert value(after, "turnout_requests_total", route=CHAT, model="", status="404") == (
        value(before, "turnout_requests_total", route=CHAT, model="", status="404") + 1
    )
    # Unknown paths share one label value: no unbounded label sets.
    assert value(after, "turnout_requests_total", route="other", model="", status="404") == (
        value(before, "turnout_requests_total", route="other", model="", status="404") + 1
    )


def test_worker_health_load_and_circuit_are_collected_at_scrape(router: Router) -> None:
    samples = scrape(router.base_url)
    workers = {
        dict(labels)["worker"] for (name, labels) in samples if name == "turnout_worker_healthy"
    }
    assert workers == {sim.url.removeprefix("grpc://") for sim in router.sims}
    for worker in workers:
        key = {"worker": worker, "model": MODEL}
        assert value(samples, "turnout_worker_healthy", **key) == 1
        assert value(samples, "turnout_worker_state", **key, state="ready") == 1
        assert value(samples, "turnout_worker_state", **key, state="unhealthy") == 0
        assert value(samples, "turnout_worker_circuit_state", **key, state="closed") == 1
        assert value(samples, "turnout_worker_load", **key) == 0


def test_retries_are_counted(router: Router) -> None:
    before = scrape(router.base_url)
    router.sims[0].knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
    router.sims[1].knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 0})
    for _ in range(2):  # round robin: one of them starts on the failing worker
        assert httpx.post(f"{router.base_url}{CHAT}", json=chat(), timeout=20).status_code == 200
    after = scrape(router.base_url)
    assert value(after, "turnout_retries_total", model=MODEL) == (
        value(before, "turnout_retries_total", model=MODEL) + 1
    )
    failures = "turnout_worker_failures_total"
    assert total(after, failures) == total(before, failures) + 1


def test_metrics_on_a_separate_port(router: Router, metrics_port: int) -> None:
    response = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10)
    assert response.status_code == 200
    samples = parse_metrics(response.text)
    assert any(name == "turnout_worker_healthy" for name, _ in samples)
    assert httpx.get(f"http://127.0.0.1:{metrics_port}/other", timeout=10).status_code == 404


# -- request ids ----------------------------------------------------------------------------------


def test_client_request_id_is_echoed_and_reaches_the_worker(router: Router) -> None:
    reply = httpx.post(
        f"{router.base_url}{CHAT}", json=chat(), headers={"x-request-id": "trace-123"}, timeout=20
    )
    assert reply.status_code == 200
    assert reply.headers["x-request-id"] == "trace-123"
    seen = [r.request_id for sim in router.sims for r in sim.requests]
    # the worker sees the client's id with a unique suffix (equal client ids never collide)
    assert any(rid.startswith("trace-123-") for rid in seen)


def test_correlation_header_is_used_when_no_request_id(router: Router) -> None:
    reply = httpx.get(
        f"{router.base_url}/v1/models", headers={"x-correlation-id": "corr-9"}, timeout=20
    )
    assert reply.headers["x-request-id"] == "corr-9"


def test_every_route_answers_with_a_request_id(router: Router) -> None:
    generated = httpx.post(f"{router.base_url}{CHAT}", json=chat(), timeout=20)
    assert generated.headers["x-request-id"].startswith("chatcmpl-")
    assert generated.json()["id"] == generated.headers["x-request-id"]
    for method, path in [("GET", "/health"), ("GET", "/nowhere"), ("GET", "/workers")]:
        response = httpx.request(method, f"{router.base_url}{path}", timeout=20)
        assert response.headers["x-request-id"].startswith("req-"), path
    bad = httpx.get(f"{router.base_url}/health", headers={"x-request-id": "bad id"}, timeout=20)
    assert bad.headers["x-request-id"].startswith("req-")


def test_request_ids_up_to_200_characters_are_kept_longer_ones_replaced(router: Router) -> None:
    longest = "i" * 199 + "~"  # printable ASCII, exactly at the cap
    kept = httpx.post(
        f"{router.base_url}{CHAT}", json=chat(), headers={"x-request-id": longest}, timeout=20
    )
    assert kept.headers["x-request-id"] == longest
    assert kept.json()["id"] == longest
    too_long = longest + "x"
    replaced = httpx.post(
        f"{router.base_url}{CHAT}", json=chat(), headers={"x-request-id": too_long}, timeout=20
    )
    assert replaced.status_code == 200
    assert replaced.headers["x-request-id"].startswith("chatcmpl-")
    # The next configured header is used when the first one's value is refused.
    fallback = httpx.get(
        f"{router.base_url}/v1/models",
        headers={"x-request-id": too_long, "x-correlation-id": longest},
        timeout=20,
    )
    assert fallback.headers["x-request-id"] == longest
    seen = {r.request_id.rsplit("-", 1)[0] for sim in router.sims for r in sim.requests}
    assert longest in seen
    assert too_long not in seen


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.addFilter(RequestIdFilter())

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logs() -> Iterator[_Collect]:
    handler = _Collect()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(old_level)


def test_log_lines_of_a_request_carry_its_id(router: Router, logs: _Collect) -> None:
    router.sims[0].knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
    router.sims[1].knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
    reply = httpx.post(
        f"{router.base_url}{CHAT}",
        json=chat(),
        headers={"x-request-id": "logged-1"},
        timeout=20,
    )
    # Both workers fail once: the request is retried, then fails, and says so in the logs.
    assert reply.status_code in (200, 503)

    def mine_now() -> list[logging.LogRecord]:
        return [r for r in logs.records if getattr(r, "request_id", None) == "logged-1"]

    # The access line is written when the server finishes the exchange, which may be just
    # after the client has read the whole answer.
    router.wait_until(lambda: any(r.name == "turnout.access" for r in mine_now()))
    mine = mine_now()
    loggers = {r.name for r in mine}
    assert "turnout.access" in loggers
    assert "turnout.routing.dispatch" in loggers, loggers  # the retried attempts
    access = next(r for r in mine if r.name == "turnout.access")
    fields = access.fields  # type: ignore[attr-defined]
    assert fields["status"] == reply.status_code
    assert fields["model"] == MODEL
    assert fields["worker"] in {sim.url.removeprefix("grpc://") for sim in router.sims}
    line = json.loads(JsonFormatter().format(access))
    assert line["request_id"] == "logged-1"
    assert line["path"] == CHAT
    assert line["latency_ms"] >= 0
