"""``--tracing``: turnout a second time with tracing on (every request traced, spans exported to
the bench's own OTLP sink), so tracing's cost is a same-run ratio (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from bench.otlp_sink import SpanSink
from bench.run import _check_args, build_parser, tracing_config
from bench.scenarios import TRACED, router_specs

from .test_harness import _check_measurement, _run


def _args(*flags: str) -> Any:
    return build_parser().parse_args(list(flags))


def test_a_traced_turnout_beside_the_plain_one_when_the_sink_is_up() -> None:
    args = _args("--tracing", "--process-counts", "1,2")
    assert _check_args(args) is None
    assert [s.target for s in router_specs("plain", args, ["turnout", "smg"])] == [
        "turnout",
        "smg",
    ]
    args.tracing_endpoint = "http://127.0.0.1:4317"
    plain = router_specs("parsers", args, ["turnout", "smg"])
    assert [(s.target, s.kind, s.tracing_endpoint) for s in plain] == [
        ("turnout", "turnout", None),
        (TRACED, "turnout", "http://127.0.0.1:4317"),
        ("smg", "smg", None),
    ]
    assert plain[1].extra == plain[0].extra  # the same parsers: only tracing differs
    # The routing, DP and PD environments compare something else: no traced twin there.
    for env in ("routing", "dp", "pd"):
        assert TRACED not in {s.target for s in router_specs(env, args, ["turnout"])}


def test_tracing_config_keeps_every_trace() -> None:
    assert tracing_config(None) is None
    section = tracing_config("http://127.0.0.1:4317")
    assert section == {
        "tracing": {
            "endpoint": "http://127.0.0.1:4317",
            "sampling_ratio": 1.0,
            "service_name": TRACED,
        }
    }


@pytest.mark.parametrize("mode", ["--soak", "--profile"])
def test_tracing_is_for_the_comparison_only(mode: str) -> None:
    assert "--tracing" in (_check_args(_args("--tracing", mode)) or "")


def test_the_sink_counts_the_spans_it_is_sent() -> None:
    spans = [trace_pb2.Span(name=name) for name in ("a", "b", "c")]
    request = trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                scope_spans=[
                    trace_pb2.ScopeSpans(spans=spans[:2]),
                    trace_pb2.ScopeSpans(spans=spans[2:]),
                ]
            )
        ]
    )
    with SpanSink() as sink:
        with grpc.insecure_channel(sink.endpoint.removeprefix("http://")) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            stub.Export(request, timeout=10)
            stub.Export(request, timeout=10)
        assert (sink.spans, sink.exports) == (6, 2)


@pytest.mark.slow
def test_tracing_run_end_to_end(tmp_path: Path) -> None:
    """turnout with tracing off and on in one run: both measured, the traced one's spans
    reached the sink, and the ratio traced/plain is reported."""
    proc, out = _run(
        tmp_path,
        *("--duration", "1", "--warmup", "0.3", "--concurrency", "2", "--workers", "1"),
        *("--scenarios", "chat_stream", "--routers", "turnout", "--max-tokens", "16"),
        *("--prompt-tokens", "50", "--no-direct", "--tracing"),
        timeout=150,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["config"]["tracing"] is True
    targets = result["results"]["chat_stream"]
    assert set(targets) == {"turnout", TRACED}
    for data in targets.values():
        _check_measurement(data, max_tokens=16, router=True)
    assert targets[TRACED]["spans_received"] > 0
    assert "spans_received" not in targets["turnout"]
    assert result["tracing"]["spans_received"] >= targets[TRACED]["spans_received"]
    assert result["ratios"][f"{TRACED}/turnout"]["chat_stream"]["cpu_per_request"] > 0
    assert f"{TRACED}/turnout" in proc.stdout
