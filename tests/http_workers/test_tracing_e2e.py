"""A traced request forwarded to an HTTP worker: the attempt is a span of the router's trace,
and its context goes upstream in ``traceparent`` (the upstream, another traced turnout, makes
its own server span a child of that attempt)."""

from __future__ import annotations

import secrets

import httpx
import pytest

from tests.tracing.receiver import ExportedSpan, OtlpReceiver, by_name
from turnout.testing.router import run_router

from .conftest import REMOTE, front

#: Server spans (the router's and the upstream's) and attempt spans share HTTP's name.
NAME = "POST /v1/chat/completions"


@pytest.fixture(autouse=True)
def quick_export(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


def test_the_attempt_is_a_span_and_its_context_goes_upstream() -> None:
    with OtlpReceiver() as collector:
        traced = {"tracing": {"endpoint": collector.endpoint, "sampling_ratio": 1.0}}
        with run_router(traced) as upstream, front([upstream.base_url], traced) as router:
            trace_id = secrets.token_hex(16)
            traceparent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
            for stream in (False, True):
                answer = httpx.post(
                    router.base_url + "/v1/chat/completions",
                    json={
                        "model": REMOTE,
                        "messages": [{"role": "user", "content": "hi"}],
                        "max_tokens": 4,
                        "stream": stream,
                    },
                    headers={"traceparent": traceparent},
                    timeout=30,
                )
                assert answer.status_code == 200

            def mine(spans: list[ExportedSpan], kind: str) -> list[ExportedSpan]:
                return [
                    s for s in by_name(spans, NAME) if s.trace_id == trace_id and s.kind == kind
                ]

            spans = collector.wait_for(
                lambda got: (
                    len(mine(got, "SPAN_KIND_SERVER")) == 4
                    and len(mine(got, "SPAN_KIND_CLIENT")) == 2
                )
            )
            url = f"{upstream.base_url}/v1/chat/completions"
    attempts = mine(spans, "SPAN_KIND_CLIENT")
    servers = mine(spans, "SPAN_KIND_SERVER")
    # An HTTP client span (not gRPC's), naming what it sent where, without secrets.
    for attempt in attempts:
        assert attempt.attributes["http.request.method"] == "POST"
        assert attempt.attributes["url.full"] == url
        assert attempt.attributes["server.address"] == "127.0.0.1"
        assert "rpc.system" not in attempt.attributes
    # Each attempt's child is the upstream's server span; the router's own is its parent.
    for attempt in attempts:
        (upstream_server,) = [s for s in servers if s.parent_id == attempt.span_id]
        assert any(s.span_id == attempt.parent_id for s in servers)
        assert upstream_server.span_id != attempt.parent_id
