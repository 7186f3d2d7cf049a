"""A span sink for ``--tracing`` runs: an OTLP/gRPC ``TraceService/Export`` endpoint on a loopback
port, in a thread of the bench process, that counts the spans it is sent and keeps nothing.

Real collectors do more per span; this one only has to answer, so what the benchmark measures is
the router's side of tracing (making, batching and exporting spans).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

__all__ = ["SpanSink"]


class SpanSink:
    """``with SpanSink() as sink:`` … ``sink.endpoint``; ``sink.spans`` and ``sink.exports`` count
    what arrived."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: Any = None
        self._lock = threading.Lock()
        self._spans = 0
        self._exports = 0
        self.port = 0

    @property
    def endpoint(self) -> str:
        """The OTLP/gRPC endpoint to give turnout's ``tracing.endpoint``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def spans(self) -> int:
        """Spans received so far."""
        with self._lock:
            return self._spans

    @property
    def exports(self) -> int:
        """Export calls received so far."""
        with self._lock:
            return self._exports

    def __enter__(self) -> SpanSink:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        import grpc
        import grpc.aio
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        request_type = trace_service_pb2.ExportTraceServiceRequest
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()

        async def export(request: Any, context: Any) -> bytes:
            count = sum(
                len(scope.spans) for spans in request.resource_spans for scope in spans.scope_spans
            )
            with self._lock:
                self._spans += count
                self._exports += 1
            return answer

        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    export,
                    request_deserializer=request_type.FromString,
                    response_serializer=lambda raw: raw,
                )
            },
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        self.port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server = server

    async def _stop(self) -> None:
        if self._server is not None:
            await self._server.stop(grace=None)
