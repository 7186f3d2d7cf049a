"""One worker of three accepts requests and never answers (the simulator's ``hang``) while 32
clients keep the router busy: the other two keep serving, and no request waits longer than the
first-response timeout plus one retry (the real router over HTTP, simulated workers over gRPC)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.ops.helpers import scrape, total
from tests.server.harness import MODEL, run_router
from turnout.sim import SimProcess, get_records

from ._load import LoadResult, closed_loop

#: What a retried request may add to the first-response timeout: one normal answer from a
#: healthy worker, with room for a busy test machine (the failure this guards against is a
#: wait of the whole request timeout, 30 s here).
RETRY_ALLOWANCE_S = 4.0
BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "a short answer please"}],
    "max_tokens": 8,
}


def run_load(base_url: str, clients: int, duration_s: float) -> LoadResult:
    result = asyncio.run(
        closed_loop(
            f"{base_url}/v1/chat/completions",
            BODY,
            clients=clients,
            duration_s=duration_s,
            timeout_s=30.0,
        )
    )
    print(f"hung worker load, {clients} clients: {result.summary()}")
    return result


def worker_info(base_url: str, url: str) -> dict[str, Any]:
    workers = httpx.get(f"{base_url}/workers", timeout=5).json()["workers"]
    return next(w for w in workers if w["url"] == url)


def check_hung_worker(base_url: str, hung_url: str) -> dict[str, Any]:
    """Every attempt on the hung worker timed out, counted as its failure, and was retried."""
    info = worker_info(base_url, hung_url)
    assert info["failures_total"] == info["requests_total"] > 0, info
    retries = total(scrape(base_url), "turnout_retries_total")
    print(f"hung worker: {info['failures_total']} timed-out attempts, {retries:g} retries")
    assert retries >= info["failures_total"]
    assert "no response to Generate" in info["last_error"]
    return info


def config(first_response_timeout_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "server": {"request_timeout_s": 30},
        "defaults": {"policy": "round_robin"},
        "wire": {"first_response_timeout_s": first_response_timeout_s},
        **extra,
    }


def test_hung_worker_does_not_stall_the_others() -> None:
    timeout_s = 1.0
    # In-process simulated workers (they share the router's CPU, hence fewer clients than the
    # slow variant); a circuit that opens after 3 failures so that it opens within the run.
    settings = config(timeout_s, circuit_breaker={"failure_threshold": 3})
    with run_router(settings, sims=3) as router:
        hung = router.sims[0]
        hung.knobs.update({"hang": True})
        result = run_load(router.base_url, clients=8, duration_s=2.0)
        assert not result.failures, result.summary()
        assert result.completions > 20, result.summary()
        assert result.worst_wait_s < timeout_s + RETRY_ALLOWANCE_S, result.summary()
        info = check_hung_worker(router.base_url, hung.url)
        assert info["circuit"] == "open"
        assert hung.records.aborted  # each request it sat on was aborted there
        router.wait_until(lambda: hung.running == 0, timeout=5)


@pytest.mark.slow
def test_hung_worker_process_under_32_clients() -> None:
    timeout_s = 2.0
    # Real simulator processes; the circuit re-opens after 5 s so that the run also goes
    # through half-open trials of the still-hung worker.
    with (
        SimProcess("--served-model-name", MODEL, "--delay-ms", "2") as good_a,
        SimProcess("--served-model-name", MODEL, "--delay-ms", "2") as good_b,
        SimProcess("--served-model-name", MODEL, "--hang") as hung,
    ):
        workers = [{"url": sim.url, "model": MODEL} for sim in (good_a, hung, good_b)]
        settings = config(timeout_s, health={}, circuit_breaker={"timeout_s": 5}, workers=workers)
        with run_router(settings, sims=0) as router:
            result = run_load(router.base_url, clients=32, duration_s=20.0)
            assert not result.failures, result.summary()
            assert result.completions > 500, result.summary()
            assert result.worst_wait_s < timeout_s + RETRY_ALLOWANCE_S, result.summary()
            info = check_hung_worker(router.base_url, hung.url)
            assert info["failures_total"] >= 10
            assert info["in_flight"] == 0
        records = asyncio.run(get_records(hung.url))
        assert len(records["aborted"]) >= info["failures_total"]
