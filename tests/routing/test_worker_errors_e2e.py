"""What clients and operators see when workers fail: client errors never name a worker's
address (the log line with the request id does), and a stream cut by a worker failure is
logged and counted with its real outcome, not as a 200 (the real router over HTTP)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.ops.helpers import scrape, value
from tests.server.harness import MODEL, Router, run_router
from tests.support import sse_events
from turnout.observability.logs import ACCESS_LOGGER, RequestIdFilter

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    config = {
        "defaults": {"policy": "round_robin"},
        "retry": {"initial_backoff_ms": 1, "max_backoff_ms": 5},
        "circuit_breaker": {"enabled": False},
        "wire": {"first_response_timeout_s": 0.5},
    }
    with run_router(config) as running:
        yield running


@pytest.fixture(autouse=True)
def healthy_workers(router: Router) -> Iterator[None]:
    yield
    for sim in router.sims:
        sim.knobs.update({"fail_status": None, "fail_after_tokens": None, "hang": False})


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    caplog.handler.addFilter(RequestIdFilter())  # stamps each line with its request's id
    return caplog


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "several words here"}],
            "stream": stream}  # fmt: skip


def addresses(router: Router) -> list[str]:
    """How a worker's address could show: its host:port, and its port alone."""
    found = []
    for sim in router.sims:
        host_port = sim.url.removeprefix("grpc://")
        found += [host_port, host_port.rsplit(":", 1)[1]]
    return found


def lines_of(caplog: pytest.LogCaptureFixture, request_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "request_id", None) == request_id]


@pytest.mark.parametrize(
    ("knobs", "status", "message"),
    [
        ({"fail_status": "UNAVAILABLE"}, 503, "the worker failed the request (UNAVAILABLE)"),
        ({"hang": True}, 504, "the worker did not start answering within 0.5s"),
    ],
)
def test_error_answer_names_no_worker_but_the_log_does(
    router: Router, logs: pytest.LogCaptureFixture, knobs: dict[str, Any], status: int, message: str
) -> None:
    for sim in router.sims:
        sim.knobs.update(knobs)
    rid = f"no-address-{status}"
    reply = httpx.post(f"{router.base_url}{CHAT}", json=chat(), headers={"x-request-id": rid},
                       timeout=20)  # fmt: skip
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["message"].startswith(message)
    assert error["code"] == "upstream_error"
    for address in addresses(router):
        assert address not in reply.text
    logged = " ".join(r.getMessage() for r in lines_of(logs, rid))
    for sim in router.sims:  # each failed attempt is logged with the worker's address
        assert sim.url in logged


def test_stream_cut_by_a_worker_is_logged_and_counted_with_its_real_outcome(
    router: Router, logs: pytest.LogCaptureFixture
) -> None:
    for sim in router.sims:
        sim.knobs.update({"fail_after_tokens": 2})
    before = scrape(router.base_url)
    rid = "cut-stream-1"
    reply = httpx.post(f"{router.base_url}{CHAT}", json=chat(stream=True),
                       headers={"x-request-id": rid}, timeout=20)  # fmt: skip
    assert reply.status_code == 200  # the stream had started
    events = sse_events(reply.text)
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["message"] == "the worker failed the request (INTERNAL)"
    for address in addresses(router):
        assert address not in reply.text

    def access_lines() -> list[logging.LogRecord]:
        return [r for r in lines_of(logs, rid) if r.name == ACCESS_LOGGER]

    router.wait_until(lambda: bool(access_lines()))  # written once the response is sent
    (access,) = access_lines()
    assert access.fields["status"] == 500  # type: ignore[attr-defined]
    assert access.fields["outcome"] == "stream_error"  # type: ignore[attr-defined]
    assert " 500 " in access.getMessage()
    assert any(s.url in r.getMessage() for r in lines_of(logs, rid) for s in router.sims)

    after = scrape(router.base_url)
    labels = {"route": CHAT, "model": MODEL}
    assert value(after, "turnout_requests_total", **labels, status="500") == (
        value(before, "turnout_requests_total", **labels, status="500") + 1
    )
    assert value(after, "turnout_requests_total", **labels, status="200") == value(
        before, "turnout_requests_total", **labels, status="200"
    )
