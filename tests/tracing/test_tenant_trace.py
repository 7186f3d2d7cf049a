"""A tenant's requests are traced with the tenant's name, never its key (refused ones too)."""

from __future__ import annotations

import httpx

from tests.server.harness import MODEL, run_router

from .receiver import OtlpReceiver, by_name
from .test_tracing_e2e import SERVER, client_context, of_trace

KEY = "secret-key-of-the-search-team"


def test_the_server_span_names_the_tenant_and_never_its_key(collector: OtlpReceiver) -> None:
    config = {
        "tracing": {"endpoint": collector.endpoint, "sampling_ratio": 1.0},
        "tenants": {"search-team": {"keys": [KEY], "requests_per_minute": 1}},
    }
    traces = []
    with run_router(config, sims=1) as router:
        for expected in (200, 429):
            trace_id, _, traceparent = client_context()
            answer = httpx.post(
                f"{router.base_url}/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {KEY}", "traceparent": traceparent},
                timeout=30,
            )
            assert answer.status_code == expected, answer.text
            traces.append(trace_id)
        spans = collector.wait_for(
            lambda got: all(len(by_name(of_trace(got, t), SERVER)) == 1 for t in traces)
        )
    for trace_id in traces:
        (server,) = by_name(of_trace(spans, trace_id), SERVER)
        assert server.attributes["turnout.tenant"] == "search-team"
    assert not any(KEY in repr(span.attributes) for span in spans)
