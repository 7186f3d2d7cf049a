"""The spans of worker selection and of each attempt on a worker (tracing on only).

An attempt's span is a client span named as gRPC spans are (``package.Service/Method``), or
for an HTTP worker as HTTP client spans are (``POST /v1/chat/completions``, with
``http.request.method`` and ``url.full``); its W3C context goes to the worker as metadata, so
that the worker's spans join the trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from opentelemetry.trace import Span
    from opentelemetry.util.types import AttributeValue

    from turnout.observability.otel import Tracing
    from turnout.workers.dp import Slot
    from turnout.workers.errors import WorkerRequestError

__all__ = ["SERVICE", "end_attempt", "select_span", "start_attempt", "start_http_attempt"]

#: The gRPC service every worker call belongs to.
SERVICE: Final = "sglang.grpc.scheduler.SglangScheduler"
#: Most candidate ids listed on a selection span (the count is always there).
_MAX_LISTED_CANDIDATES: Final = 32
#: gRPC metadata of a worker call (the W3C trace context).
Metadata = tuple[tuple[str, str], ...]


def select_span(tracing: Tracing, policy: object, candidates: list[Slot]) -> Span:
    """The span of one worker selection: the policy and the candidates (end it with the
    choice: ``tracing.end(span, attributes={...})``)."""
    return tracing.start_span(
        "select worker",
        {
            "turnout.policy": type(policy).__name__,
            "turnout.candidates": [slot.id for slot in candidates[:_MAX_LISTED_CANDIDATES]],
            "turnout.candidates.count": len(candidates),
        },
    )


def start_attempt(
    tracing: Tracing, slot: Slot, attempt: int, rpc: str, role: str | None = None
) -> tuple[Span, Metadata]:
    """The span of attempt ``attempt`` of ``rpc`` on ``slot`` (of a prefill-decode ``role``),
    and the metadata that makes it the parent of the worker's spans."""
    attributes = _attempt_attributes(slot, attempt, rpc)
    if role is not None:
        attributes["turnout.role"] = role
    span = tracing.start_span(f"{SERVICE}/{rpc}", attributes, client=True)
    return span, tracing.worker_metadata(span)


def start_http_attempt(
    tracing: Tracing, slot: Slot, attempt: int, request: str
) -> tuple[Span, Metadata]:
    """The span of attempt ``attempt`` of an HTTP ``request`` (``"POST /v1/..."``) on an HTTP
    worker's ``slot``, and the headers that make it the parent of the upstream's spans."""
    method, _, path = request.partition(" ")
    address = urlsplit(slot.url)
    host = address.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if address.port is not None:
        netloc += f":{address.port}"
    # The worker's base without its user info, query or fragment (none may hold a secret).
    base = address.path.rstrip("/").removesuffix("/v1")
    attributes: dict[str, AttributeValue] = {
        "http.request.method": method,
        "server.address": host,
        "url.full": f"{address.scheme}://{netloc}{base}{path}",
        "turnout.worker.id": slot.id,
        "turnout.attempt": attempt,
        "turnout.retry": attempt > 1,
    }
    if address.port is not None:
        attributes["server.port"] = address.port
    if attempt > 1:
        attributes["http.request.resend_count"] = attempt - 1
    span = tracing.start_span(request, attributes, client=True)
    return span, tracing.worker_metadata(span)


def _attempt_attributes(slot: Slot, attempt: int, rpc: str) -> dict[str, AttributeValue]:
    address = urlsplit(slot.url)
    attributes: dict[str, AttributeValue] = {
        "rpc.system": "grpc",
        "rpc.service": SERVICE,
        "rpc.method": rpc,
        "server.address": address.hostname or "",
        "turnout.worker.id": slot.id,
        "turnout.attempt": attempt,
        "turnout.retry": attempt > 1,
    }
    if address.port is not None:
        attributes["server.port"] = address.port
    return attributes


def end_attempt(
    span: Span,
    failure: WorkerRequestError | None,
    *,
    exc: BaseException | None = None,
    retrying: bool = False,
    resent: bool = False,
    cancelled: bool = False,
) -> None:
    """End an attempt's span: its outcome, and whether another attempt follows."""
    from opentelemetry.trace import Status, StatusCode

    if span.is_recording():
        if cancelled:
            span.set_attribute("turnout.outcome", "cancelled")
        elif failure is None:
            span.set_attribute("turnout.outcome", "ok")
        else:
            code = getattr(exc, "code", None)
            span.set_attributes(
                {
                    "turnout.outcome": "refused" if resent else "failed",
                    "turnout.status": failure.status,
                    "turnout.worker_fault": failure.worker_fault,
                    "turnout.retrying": retrying or resent,
                    "error.type": getattr(code, "name", None) or type(exc or failure).__name__,
                }
            )
            if code is not None and hasattr(code, "value"):
                span.set_attribute("rpc.grpc.status_code", code.value[0])
            span.set_status(Status(StatusCode.ERROR, failure.detail))
    span.end()
