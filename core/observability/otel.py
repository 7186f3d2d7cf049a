"""OpenTelemetry tracing while it is on (imported only then, by
:func:`turnout.observability.tracing.start_tracing`).

* The SDK's tracer provider, sampling by ratio (parent-based: a client's ``traceparent``
  decides for its trace), exporting over OTLP (gRPC or HTTP) from a ``BatchSpanProcessor``: a
  bounded queue emptied by the SDK's own thread, so ending a span never waits on the network,
  and a full queue drops spans instead of growing.
* A collector that cannot be reached is logged once per outage (the SDK's exporters would log
  every failed batch and retry), and again when exports work again.
* The server span of each request comes from Litestar's OpenTelemetry integration (ASGI
  instrumentation: it honours the client's ``traceparent``), without its per-message send and
  receive spans (one per SSE chunk) and without its metrics (Prometheus has them).
* :class:`Tracing` opens the router's own spans and renders a span's W3C context as the gRPC
  metadata sent to the worker, so that the worker's spans join the trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from litestar.middleware.base import DefineMiddleware
from litestar.plugins.opentelemetry import (
    OpenTelemetryConfig,
    OpenTelemetryInstrumentationMiddleware,
)
from litestar.types import Message, Receive, Scope, Send
from opentelemetry import propagate, trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from turnout import __version__
from turnout.errors import ConfigError
from turnout.observability.logs import QUIET_PATHS, current_record
from turnout.observability.metrics import route_label
from turnout.observability.tracing import TracingSettings

__all__ = ["Tracing", "WorkerMetadata"]

log = logging.getLogger(__name__)

#: gRPC metadata of a worker call: (lower-case key, value) pairs.
WorkerMetadata = tuple[tuple[str, str], ...]
#: Keys of the W3C context passed to workers, and the most bytes they may take.
_CONTEXT_KEYS: Final = frozenset({"traceparent", "tracestate", "baggage"})
_MAX_METADATA_BYTES: Final = 8192
#: The SDK loggers that would report every failed export and full queue (we report once).
_NOISY_LOGGERS: Final = ("opentelemetry.exporter", "opentelemetry.sdk._shared_internal")
#: The request's server span, remembered by the ASGI instrumentation's hook.
_SERVER_SPAN: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "turnout_server_span", default=None
)


class _ReportingExporter(SpanExporter):
    """Wraps an OTLP exporter: a failing collector is logged once, until exports work again."""

    def __init__(self, inner: SpanExporter, target: str) -> None:
        self._inner = inner
        self._target = target
        self._failing = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            log.debug("exporting %d spans raised", len(spans), exc_info=True)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            if self._failing:
                self._failing = False
                log.info("traces are exported to %s again", self._target)
        elif not self._failing:
            self._failing = True
            log.warning(
                "cannot export traces to %s; spans are dropped until it answers "
                "(requests are not affected; logged once)",
                self._target,
            )
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


def _otlp_exporter(settings: TracingSettings) -> SpanExporter:
    if settings.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=settings.endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    return HttpExporter(endpoint=settings.endpoint)


def _quiet_sdk_loggers() -> None:
    """Leave export failures to :class:`_ReportingExporter` (unless turnout logs at debug)."""
    if log.isEnabledFor(logging.DEBUG):
        return
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _span_details(scope: Any) -> tuple[str, dict[str, str]]:
    """Server span name and route from the path, with a bounded set of values."""
    route = route_label(scope.get("path", ""))
    return f"{scope.get('method', '')} {route}", {"http.route": route}


def _remember_server_span(span: Span, scope: Any) -> None:
    _SERVER_SPAN.set(span)


def _tag_server_span() -> None:
    """What the request record knows when the response starts, on the server span (the
    request id, the model, the worker, the attempts and the tenant)."""
    span = _SERVER_SPAN.get()
    record = current_record()
    if span is None or record is None or not span.is_recording():
        return
    attributes: dict[str, AttributeValue] = {"turnout.request_id": record.ensure_id()}
    if record.model is not None:
        attributes["gen_ai.request.model"] = record.model
    if record.worker is not None:
        attributes["turnout.worker.id"] = record.worker
    if record.attempts:
        attributes["turnout.attempts"] = record.attempts
    if record.tenant is not None:  # the tenant's name: its key never leaves the key check
        attributes["turnout.tenant"] = record.tenant
    span.set_attributes(attributes)


class _ServerSpans(OpenTelemetryInstrumentationMiddleware):
    """Litestar's OpenTelemetry middleware, tagging the server span as the response starts."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def tagging_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                _tag_server_span()
            await send(message)

        await super().__call__(scope, receive, tagging_send)


class Tracing:
    """Tracing that is on: spans of the router, the server span's plugin, the exporter."""

    def __init__(self, settings: TracingSettings) -> None:
        self.settings = settings
        ratio = settings.sampling_ratio
        sampler = None if ratio is None else ParentBased(TraceIdRatioBased(ratio))
        self.provider = TracerProvider(
            sampler=sampler, resource=Resource.create({SERVICE_NAME: settings.service_name})
        )
        self.tracer = self.provider.get_tracer("turnout", __version__)
        self._processor: BatchSpanProcessor | None = None

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start exporting (spans ended before are dropped)."""
        if self._processor is not None:
            return
        settings = self.settings
        target = settings.endpoint or "the OTEL_EXPORTER_OTLP endpoint"
        _quiet_sdk_loggers()
        exporter = _ReportingExporter(_otlp_exporter(settings), target)
        try:
            self._processor = BatchSpanProcessor(exporter)
        except ValueError as exc:  # OTEL_BSP_* variables that do not fit together
            raise ConfigError(f"tracing: {exc}") from None
        self.provider.add_span_processor(self._processor)
        log.info(
            "tracing: exporting to %s over OTLP/%s as service %r",
            target,
            settings.protocol,
            settings.service_name,
        )

    async def stop(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109 - a bound on a thread
        """Export what is queued and stop, waiting at most ``timeout`` seconds (the flush runs
        in a thread of its own: the event loop never waits on the collector)."""
        processor, self._processor = self._processor, None
        if processor is None:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        def flush() -> None:
            try:
                processor.shutdown()  # type: ignore[no-untyped-call]
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed after the timeout
                    loop.call_soon_threadsafe(finished)

        threading.Thread(target=flush, name="turnout-trace-flush", daemon=True).start()
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout)
        except TimeoutError:
            log.warning("tracing: queued spans not exported within %gs at shutdown", timeout)

    def litestar_middleware(self) -> DefineMiddleware:
        """Litestar's OpenTelemetry integration: a server span per request (health checks and
        ``/metrics`` left out), the client's ``traceparent`` honoured. Litestar puts it
        outermost (outside CORS and the error handlers) when it is in the app's middleware."""
        return OpenTelemetryConfig(
            tracer_provider=self.provider,
            meter_provider=NoOpMeterProvider(),
            exclude=[f"^{path}$" for path in sorted(QUIET_PATHS)],
            exclude_spans=["receive", "send"],
            scope_span_details_extractor=_span_details,
            server_request_hook_handler=_remember_server_span,
            middleware_class=_ServerSpans,
        ).middleware

    # -- spans ---------------------------------------------------------------------------------

    def start_span(
        self,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        client: bool = False,
        start_time: int | None = None,
    ) -> Span:
        """A span, child of the current one (the request's server span or a stage's span);
        ``client`` for a call to a worker. End it with :meth:`end`."""
        return self.tracer.start_span(
            name,
            kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start_time,
        )

    @staticmethod
    def end(
        span: Span,
        error: str | None = None,
        attributes: Mapping[str, AttributeValue] | None = None,
    ) -> None:
        """End ``span``, with ``attributes``, as failed with ``error`` when given."""
        if span.is_recording():
            if attributes:
                span.set_attributes(attributes)
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    @staticmethod
    def worker_metadata(span: Span) -> WorkerMetadata:
        """The W3C context (``traceparent``, ``tracestate``, ``baggage``) with ``span`` as the
        parent, as gRPC metadata for the worker call ``span`` stands for. Only printable ASCII
        values within a size bound are passed (a worker refuses other metadata)."""
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        pairs = []
        size = 0
        for key, value in carrier.items():
            name = key.lower()
            size += len(name) + len(value)
            if (
                name in _CONTEXT_KEYS
                and value.isascii()
                and value.isprintable()
                and size <= _MAX_METADATA_BYTES
            ):
                pairs.append((name, value))
        return tuple(pairs)
