"""Traces of real requests: the router exports over OTLP/gRPC to a collector (built from the
``opentelemetry-proto`` stubs) and passes the W3C context to the simulated workers."""

from __future__ import annotations

import json
import secrets
from typing import Any

import httpx
import pytest

from tests.server.harness import MODEL, Router, run_router
from turnout.workers.ids import default_worker_id

from .receiver import ExportedSpan, OtlpHttpReceiver, OtlpReceiver, by_name, children

GENERATE = "sglang.grpc.scheduler.SglangScheduler/Generate"
SERVER = "POST /v1/chat/completions"
STREAM = "stream"
TTFT = "time to first token"


def traced(collector: OtlpReceiver, **extra: Any) -> dict[str, Any]:
    tracing = {"endpoint": collector.endpoint, "sampling_ratio": 1.0}
    return {"tracing": tracing, **extra}


def client_context() -> tuple[str, str, str]:
    """(trace id, span id, traceparent) of a client that traces its own call."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def chat(router: Router, text: str, headers: dict[str, str], **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}
    response = httpx.post(
        f"{router.base_url}/v1/chat/completions", json=body, headers=headers, timeout=30
    )
    assert response.status_code == 200, response.text
    return response


def of_trace(spans: list[ExportedSpan], trace_id: str) -> list[ExportedSpan]:
    return [span for span in spans if span.trace_id == trace_id]


def complete(trace_id: str, generates: int = 1) -> Any:
    """A check: the trace's server span and ``generates`` ended Generate spans have arrived."""

    def check(spans: list[ExportedSpan]) -> bool:
        mine = of_trace(spans, trace_id)
        return (
            len(by_name(mine, SERVER)) == 1
            and len(by_name(mine, GENERATE)) == generates
            and len(by_name(mine, STREAM)) == 1
        )

    return check


def worker_ids(router: Router) -> list[str]:
    return sorted(default_worker_id(f"grpc://127.0.0.1:{sim.port}") for sim in router.sims)


def worker_context(router: Router) -> list[dict[str, str]]:
    return [context for sim in router.sims for context in sim.records.metadata.values()]


@pytest.mark.parametrize("transport", ["native", "grpcio"])
@pytest.mark.parametrize("stream", [False, True])
def test_span_tree_and_worker_context(
    collector: OtlpReceiver, transport: str, stream: bool
) -> None:
    trace_id, client_span, traceparent = client_context()
    with run_router(traced(collector, wire={"transport": transport})) as router:
        response = chat(router, "hello there", {"traceparent": traceparent}, stream=stream)
        if stream:
            assert response.text.rstrip().endswith("data: [DONE]")
        spans = of_trace(collector.wait_for(complete(trace_id)), trace_id)
        contexts = worker_context(router)

    (server,) = by_name(spans, SERVER)
    assert server.kind == "SPAN_KIND_SERVER"
    assert server.parent_id == client_span  # the client's traceparent is honoured
    assert server.resource["service.name"] == "turnout"
    assert server.attributes["http.route"] == "/v1/chat/completions"
    assert server.attributes["gen_ai.request.model"] == MODEL
    assert server.attributes["turnout.request_id"] == response.headers["x-request-id"]

    (select,) = by_name(spans, "select worker")
    (attempt,) = by_name(spans, GENERATE)
    assert {select.span_id, attempt.span_id} <= {s.span_id for s in children(spans, server)}
    assert select.attributes["turnout.policy"] == "RoundRobinPolicy"
    assert select.attributes["turnout.candidates.count"] == 2
    assert sorted(select.attributes["turnout.candidates"]) == worker_ids(router)
    chosen = select.attributes["turnout.worker.id"]
    assert attempt.kind == "SPAN_KIND_CLIENT"
    assert attempt.attributes["turnout.worker.id"] == chosen
    assert attempt.attributes["turnout.attempt"] == 1
    assert attempt.attributes["turnout.retry"] is False
    assert attempt.attributes["turnout.outcome"] == "ok"
    assert attempt.attributes["rpc.method"] == "Generate"
    assert not attempt.error

    # The worker got the W3C context with the attempt's span as its parent.
    (context,) = contexts
    assert context["traceparent"] == f"00-{trace_id}-{attempt.span_id}-01"

    # The flow's stages: prepare (template, tokens), then time to first token and the stream.
    (prepare,) = by_name(spans, "prepare")
    (ttft,) = by_name(spans, TTFT)
    (streamed,) = by_name(spans, STREAM)
    assert {prepare.parent_id, ttft.parent_id, streamed.parent_id} == {server.span_id}
    assert prepare.attributes["gen_ai.request.model"] == MODEL
    assert prepare.attributes["gen_ai.usage.input_tokens"] > 0
    assert prepare.attributes["turnout.stream"] is stream
    assert prepare.end_ns <= select.start_ns
    assert ttft.start_ns <= prepare.start_ns
    assert ttft.end_ns <= streamed.end_ns
    assert streamed.attributes["turnout.outcome"] == "ok"
    prepared = prepare.attributes["gen_ai.usage.input_tokens"]
    assert streamed.attributes["gen_ai.usage.input_tokens"] == prepared
    assert streamed.attributes["gen_ai.usage.output_tokens"] > 0
    assert streamed.attributes["gen_ai.response.finish_reasons"] in (["stop"], ["length"])
    assert streamed.attributes["turnout.batches"] >= 1


def test_each_attempt_is_a_span_and_the_worker_joins_its_attempt(collector: OtlpReceiver) -> None:
    with run_router(traced(collector)) as router:
        broken, healthy = router.sims
        broken.knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 1})
        healthy.knobs.update({"fail_status": "UNAVAILABLE", "fault_budget": 0})
        traces = []
        for _ in range(2):  # round robin: one of them starts on the broken worker
            trace_id, _, traceparent = client_context()
            chat(router, "hello there", {"traceparent": traceparent})
            traces.append(trace_id)
        spans = collector.wait_for(
            lambda got: sum(len(by_name(of_trace(got, t), GENERATE)) for t in traces) == 3
        )
        broken_seen = dict(broken.records.metadata)
        healthy_seen = dict(healthy.records.metadata)

    (retried,) = [t for t in traces if len(by_name(of_trace(spans, t), GENERATE)) == 2]
    mine = of_trace(spans, retried)
    first, second = sorted(by_name(mine, GENERATE), key=lambda s: s.attributes["turnout.attempt"])
    (server,) = by_name(mine, SERVER)
    assert first.parent_id == second.parent_id == server.span_id
    assert first.error
    assert second.attributes["turnout.outcome"] == "ok"
    assert first.attributes["turnout.outcome"] == "failed"
    assert first.attributes["turnout.retrying"] is True
    assert first.attributes["turnout.status"] == 503
    assert first.attributes["error.type"] == "UNAVAILABLE"
    assert first.attributes["rpc.grpc.status_code"] == 14
    assert (first.attributes["turnout.retry"], second.attributes["turnout.retry"]) == (False, True)
    assert len(by_name(mine, "select worker")) == 2
    assert server.attributes["turnout.attempts"] == 2
    # Each worker saw its own attempt as the parent.
    parents = {c["traceparent"] for c in [*broken_seen.values(), *healthy_seen.values()]}
    assert f"00-{retried}-{first.span_id}-01" in parents
    assert f"00-{retried}-{second.span_id}-01" in parents


def test_a_client_that_leaves_a_stream_ends_the_spans(collector: OtlpReceiver) -> None:
    trace_id, _, traceparent = client_context()
    with run_router(traced(collector), sim_kwargs={"delay_ms": 20}) as router:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "tell me a long story"}],
            "stream": True,
            "max_tokens": 400,
        }
        with (
            httpx.Client(timeout=30) as client,
            client.stream(
                "POST",
                f"{router.base_url}/v1/chat/completions",
                json=body,
                headers={"traceparent": traceparent},
            ) as response,
        ):
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
        # The worker is told to stop, and the spans end.
        router.wait_until(lambda: any(sim.aborted for sim in router.sims))
        spans = of_trace(collector.wait_for(complete(trace_id)), trace_id)
        assert chat(router, "still serving", {}).json()["choices"]

    (attempt,) = by_name(spans, GENERATE)
    assert attempt.attributes["turnout.outcome"] == "cancelled"
    assert not attempt.error
    (streamed,) = by_name(spans, STREAM)
    assert streamed.attributes["turnout.outcome"] == "cancelled"
    assert not streamed.error
    assert streamed.attributes["gen_ai.response.finish_reasons"] == []
    (server,) = by_name(spans, SERVER)
    assert server.end_ns >= attempt.start_ns


def test_unsampled_traces_export_nothing_but_reach_the_worker(collector: OtlpReceiver) -> None:
    config = {"tracing": {"endpoint": collector.endpoint, "sampling_ratio": 0.0}}
    with run_router(config) as router:
        chat(router, "hello there", {})
        (context,) = worker_context(router)
        trace_id, _, traceparent = client_context()
        chat(router, "hello again", {"traceparent": traceparent})  # the client's choice wins
        collector.wait_for(complete(trace_id))
    # Not sampled (the flags' lowest bit), and no span of that trace was exported.
    version, unsampled, _, flags = context["traceparent"].split("-")
    assert version == "00"
    assert int(flags, 16) & 1 == 0
    assert not of_trace(collector.spans(), unsampled)


def test_configured_by_otel_variables_alone(
    collector: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway-eu")
    trace_id, _, traceparent = client_context()
    with run_router() as router:
        chat(router, "hello there", {"traceparent": traceparent})
        spans = collector.wait_for(complete(trace_id))
    assert {span.resource["service.name"] for span in spans} == {"gateway-eu"}


def test_exported_over_otlp_http() -> None:
    trace_id, _, traceparent = client_context()
    with OtlpHttpReceiver() as collector:
        section = {"endpoint": collector.endpoint, "protocol": "http/protobuf"}
        with run_router({"tracing": section}) as router:
            chat(router, "hello there", {"traceparent": traceparent})
            spans = of_trace(collector.wait_for(complete(trace_id)), trace_id)
            # A request refused before any worker: its server span, with its id, and the
            # stage that refused it.
            refused_trace, _, refused_parent = client_context()
            refused = httpx.post(
                f"{router.base_url}/v1/chat/completions",
                json={"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]},
                headers={"traceparent": refused_parent},
                timeout=30,
            )
            assert refused.status_code == 404
            got = collector.wait_for(lambda all_spans: len(of_trace(all_spans, refused_trace)) == 2)
    assert {span.name for span in spans} == {
        SERVER,
        "prepare",
        "select worker",
        GENERATE,
        TTFT,
        STREAM,
    }
    (lone,) = by_name(of_trace(got, refused_trace), SERVER)
    assert lone.attributes["http.status_code"] == 404
    assert lone.attributes["turnout.request_id"] == refused.headers["x-request-id"]
    (failed,) = by_name(of_trace(got, refused_trace), "prepare")
    assert failed.error
    assert "no-such-model" in failed.status_message


@pytest.mark.parametrize("stream", [False, True])
def test_a_traced_responses_call_is_kept_in_the_store(
    collector: OtlpReceiver, stream: bool
) -> None:
    """The stage spans watch the renderer without hiding any of it: the Responses API keeps its
    answer in the store at the renderer's ``complete`` step, with tracing on too."""
    with run_router(traced(collector)) as router:
        body = {"model": MODEL, "input": "keep me", "stream": stream}
        created = httpx.post(f"{router.base_url}/v1/responses", json=body, timeout=30)
        assert created.status_code == 200, created.text
        if stream:
            data = [line for line in created.text.splitlines() if line.startswith("data: ")]
            response_id = json.loads(data[0].removeprefix("data: "))["response"]["id"]
        else:
            response_id = created.json()["id"]
        kept = httpx.get(f"{router.base_url}/v1/responses/{response_id}", timeout=30)
        assert kept.status_code == 200, kept.text
        assert kept.json()["status"] == "completed"
        collector.wait_for(lambda spans: len(by_name(spans, STREAM)) >= 1)


def test_a_migration_is_an_event_of_the_stream_span(collector: OtlpReceiver) -> None:
    with run_router(traced(collector), sim_kwargs={"context_answers": True}) as router:
        broken = router.sims[0]
        broken.knobs.update(
            {"fail_after_tokens": 3, "fail_after_status": "UNAVAILABLE", "fault_budget": 1}
        )
        traces = []
        for _ in range(2):  # round robin: one of them starts on the broken worker
            trace_id, _, traceparent = client_context()
            chat(router, "hello there", {"traceparent": traceparent}, stream=True, max_tokens=9)
            traces.append(trace_id)
        spans = collector.wait_for(
            lambda got: all(len(by_name(of_trace(got, t), STREAM)) == 1 for t in traces)
        )
    events = [e for t in traces for s in by_name(of_trace(spans, t), STREAM) for e in s.events]
    assert [name for name, _ in events] == ["migration"]
    ids = worker_ids(router)
    attributes = events[0][1]
    assert attributes["turnout.migration.tokens"] == 3
    assert attributes["turnout.migration.reason"] == "unavailable"
    assert sorted([attributes["turnout.migration.from"], attributes["turnout.migration.to"]]) == ids
