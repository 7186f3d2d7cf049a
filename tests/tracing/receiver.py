"""A small OTLP/gRPC trace collector for tests: a ``grpc.aio`` server implementing
``TraceService/Export`` (from the ``opentelemetry-proto`` stubs) on a loopback port, in a thread
of its own, keeping every span it is sent."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
import grpc.aio
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto
from opentelemetry.proto.trace.v1.trace_pb2 import Status


@dataclass(frozen=True)
class ExportedSpan:
    """One span as the collector received it (ids as lower-case hex)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    attributes: dict[str, Any]
    error: bool
    status_message: str
    resource: dict[str, Any]
    start_ns: int
    end_ns: int
    #: (name, attributes) of each event.
    events: tuple[tuple[str, dict[str, Any]], ...] = ()


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


def exported_spans(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ExportedSpan]:
    """The spans of one OTLP export request."""
    received = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                received.append(
                    ExportedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        kind=SpanProto.SpanKind.Name(span.kind),
                        attributes=_attributes(span.attributes),
                        error=span.status.code == Status.STATUS_CODE_ERROR,
                        status_message=span.status.message,
                        resource=resource,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        events=tuple((e.name, _attributes(e.attributes)) for e in span.events),
                    )
                )
    return received


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: list[ExportedSpan], lock: threading.Lock) -> None:
        self._sink = sink
        self._lock = lock

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        received = exported_spans(request)
        with self._lock:
            self._sink.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()


class _Spans:
    """What a collector received."""

    def __init__(self) -> None:
        self._spans: list[ExportedSpan] = []
        self._lock = threading.Lock()

    def spans(self) -> list[ExportedSpan]:
        """Every span received so far."""
        with self._lock:
            return list(self._spans)

    def wait_for(
        self, check: Callable[[list[ExportedSpan]], bool], timeout: float = 20.0
    ) -> list[ExportedSpan]:
        """The spans once ``check(spans)`` holds; AssertionError after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if check(spans):
                return spans
            if time.monotonic() > deadline:
                names = sorted(span.name for span in spans)
                raise AssertionError(f"expected spans not received in time; got {names}")
            time.sleep(0.02)


class OtlpReceiver(_Spans):
    """``with OtlpReceiver() as collector:`` … ``collector.endpoint``, ``collector.spans()``."""

    def __init__(self) -> None:
        super().__init__()
        self._loop = asyncio.new_event_loop()
        self._server: grpc.aio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        server = grpc.aio.server()
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(
            _Collector(self._spans, self._lock), server
        )
        self.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)


class OtlpHttpReceiver(_Spans):
    """An OTLP/HTTP collector (``POST /v1/traces``, protobuf) on a loopback port."""

    def __init__(self) -> None:
        super().__init__()
        sink, lock = self._spans, self._lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                ok = self.path == "/v1/traces"
                if ok:
                    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                    with lock:
                        sink.extend(exported_spans(request))
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if ok else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpHttpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


def by_name(spans: list[ExportedSpan], name: str) -> list[ExportedSpan]:
    return [span for span in spans if span.name == name]


def children(spans: list[ExportedSpan], parent: ExportedSpan) -> Iterator[ExportedSpan]:
    return (span for span in spans if span.parent_id == parent.span_id)
