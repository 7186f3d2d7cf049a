"""Settings of the worker layer (msgspec structs; defaults are the SGLang router's).

The lead embeds :class:`WorkersSettings` in the main configuration. Per-worker overrides
(:class:`HealthOverride`, :class:`BreakerOverride`) only name what differs from the defaults.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

import msgspec

from turnout.http_workers.settings import HttpWorkersSettings
from turnout.workers.roles import Role

Positive = Annotated[float, msgspec.Meta(gt=0)]
NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Count = Annotated[int, msgspec.Meta(ge=1)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]


class _Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of every settings struct: unknown keys are errors."""


class HealthSettings(_Section):
    """Active health checks (``HealthCheck`` RPC)."""

    enabled: bool = True
    #: Probe period of a ready or unhealthy worker.
    interval_s: Positive = 60.0
    #: Per-probe deadline (also used for ``GetModelInfo``/``GetServerInfo``/``GetLoads``).
    timeout_s: Positive = 5.0
    #: Consecutive failed probes before a ready worker is taken out of rotation.
    failure_threshold: Count = 3
    #: Consecutive good probes before an unhealthy worker is routable again.
    success_threshold: Count = 2
    #: Probe period of a worker that never answered yet (turnout starts without its workers
    #: and picks them up when they come up).
    pending_interval_s: Positive = 5.0
    #: A probe that times out or cannot connect is ignored while the worker keeps answering real
    #: requests: a busy worker whose probe is slow is not pulled out of rotation. A worker that
    #: answers ``healthy=false`` is not excused (it said so itself).
    traffic_counts_as_liveness: bool = True
    #: Subscribe to each healthy worker's KV events (``SubscribeKvEvents``): its cached blocks
    #: for ``cache_aware`` and its pushed load (then ``GetLoads`` is not polled for it).
    kv_events: bool = True
    #: Out of rotation while its engine reports no output for this long with requests in flight
    #: (``engine_silence_ms``), plus the time its pending prefill may take (wedged).
    wedge_after_s: Positive = 3.0
    #: Out of rotation while its event stream, which sends heartbeats, is silent this long since
    #: a request of this router went to it (a stopped or unreachable process), or this long
    #: plus the longest gap between its records so far (an idle engine may heartbeat rarely).
    stale_after_s: Positive = 3.0
    #: Prefill rate assumed for the wedge allowance until one is measured on the worker.
    assumed_prefill_tokens_per_s: Positive = 2000.0


class BreakerSettings(_Section):
    """Per-worker circuit breaker over request outcomes (worker faults only)."""

    enabled: bool = True
    #: Consecutive worker faults that open a closed circuit.
    failure_threshold: Count = 10
    #: Consecutive successes in half-open that close the circuit.
    success_threshold: Count = 3
    #: Time in open before traffic is tried again (half-open).
    timeout_s: Positive = 60.0


class RetrySettings(_Section):
    """Retries of a request that failed on a worker before its first response."""

    enabled: bool = True
    #: Total attempts including the first (each on a worker not yet tried for this request).
    max_attempts: Count = 5
    initial_backoff_ms: NonNegative = 50.0
    max_backoff_ms: NonNegative = 30_000.0
    backoff_multiplier: Annotated[float, msgspec.Meta(ge=1)] = 1.5
    #: The delay is multiplied by ``1 + U(-jitter, +jitter)``.
    jitter_factor: Fraction = 0.2


class LoadMonitorSettings(_Section):
    """The workers' own load for load-aware policies: polled with ``GetLoads``, or taken from
    their KV-event stream when they push it."""

    #: False: a worker's load is only this router's requests on it (neither polled nor pushed).
    enabled: bool = True
    interval_s: Positive = 10.0


class HealthOverride(_Section):
    """Per-worker health settings; unset fields keep the global value."""

    enabled: bool | None = None
    interval_s: Positive | None = None
    timeout_s: Positive | None = None
    failure_threshold: Count | None = None
    success_threshold: Count | None = None
    pending_interval_s: Positive | None = None
    traffic_counts_as_liveness: bool | None = None
    kv_events: bool | None = None
    wedge_after_s: Positive | None = None
    stale_after_s: Positive | None = None
    assumed_prefill_tokens_per_s: Positive | None = None


class BreakerOverride(_Section):
    """Per-worker circuit-breaker settings; unset fields keep the global value."""

    enabled: bool | None = None
    failure_threshold: Count | None = None
    success_threshold: Count | None = None
    timeout_s: Positive | None = None


class WorkerSpec(_Section):
    """One worker, from the config or ``POST /workers``."""

    url: str
    #: Served model id; wins over what the worker reports.
    model: str | None = None
    #: Stable id; defaults to ``host:port`` of the URL.
    id: str | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    #: Data-parallel ranks to route to, overriding the ``dp_size`` the worker reports; 1
    #: routes to the worker as a whole and leaves the rank to its own scheduler.
    dp_size: Count | None = None
    #: ``regular``, ``prefill`` or ``decode``; unset: what the worker reports
    #: (``disaggregation_mode`` in its server info), regular if it reports nothing.
    role: Role | None = None
    #: A prefill worker's KV bootstrap port; unset: what the worker reports, else 8998.
    bootstrap_port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    #: The protocol the worker speaks; unset: from the URL's scheme (``vllm+grpc://``,
    #: ``trtllm+grpc://``; ``grpc://`` is SGLang; ``http(s)://`` an OpenAI-compatible server).
    kind: Literal["sglang", "vllm", "trtllm", "http"] | None = None
    health: HealthOverride | None = None
    circuit_breaker: BreakerOverride | None = None
    #: An HTTP worker's API key: the name of the environment variable holding it (sent as
    #: ``Authorization: Bearer``; the key itself is never logged nor shown).
    api_key_env: str | None = None
    #: The path an HTTP worker is probed on (any 2xx answer is healthy).
    health_path: str = "/v1/models"


class WireSettings(_Section):
    """How turnout talks gRPC to its workers."""

    #: ``native``: turnout's own HTTP/2 client (about 4x less router CPU per streamed token);
    #: ``grpcio``: ``grpc.aio``, the reference implementation, as a fallback.
    transport: Literal["native", "grpcio"] = "native"
    #: A PING after this much silence from a worker while requests wait on it …
    keepalive_time_s: Positive = 30.0
    #: … and the connection counts as dead when the PING is not answered within this.
    keepalive_timeout_s: Positive = 10.0
    #: Bound of one connection attempt (TCP, and TLS for ``grpcs://``).
    connect_timeout_s: Positive = 5.0
    #: Upper bound of the reconnect back-off after failed attempts.
    max_reconnect_backoff_s: Positive = 5.0
    #: Longest wait for a worker's first message of a ``Generate`` call (queueing and prefill).
    #: Past it the request is aborted on that worker, counted as a fault of the worker (circuit
    #: breaker) and retried on another one. Generous, since a long prompt on a busy worker may
    #: take a while to prefill; 0 waits as long as the request timeout allows.
    first_response_timeout_s: NonNegative = 120.0
    #: While the router's event loop is busy, a stream takes its worker's messages at most this
    #: often; the tokens that arrive meanwhile go out together in one event. Fewer, larger steps
    #: per stream keep the loop's turns short, so that new requests reach their first token
    #: sooner. A stream's first token and its end are never held back, and a loop that keeps up
    #: sends every message at once. 0 turns pacing off.
    busy_read_interval_ms: NonNegative = 25.0


class WorkersSettings(_Section):
    """Everything the worker layer needs; defaults match the SGLang router."""

    workers: list[WorkerSpec] = msgspec.field(default_factory=list)
    health: HealthSettings = msgspec.field(default_factory=HealthSettings)
    circuit_breaker: BreakerSettings = msgspec.field(default_factory=BreakerSettings)
    retry: RetrySettings = msgspec.field(default_factory=RetrySettings)
    load_monitor: LoadMonitorSettings = msgspec.field(default_factory=LoadMonitorSettings)
    wire: WireSettings = msgspec.field(default_factory=WireSettings)
    #: The client of HTTP workers.
    http: HttpWorkersSettings = msgspec.field(default_factory=HttpWorkersSettings)
    #: ``DELETE /workers/{id}`` waits this long for in-flight requests before removing anyway.
    drain_timeout_s: NonNegative = 600.0


S = TypeVar("S", bound=_Section)


def apply_override(base: S, override: _Section | None) -> S:
    """``base`` with every field that ``override`` sets replaced."""
    if override is None:
        return base
    changes: dict[str, Any] = {
        name: value
        for name in override.__struct_fields__
        if (value := getattr(override, name)) is not None
    }
    return msgspec.structs.replace(base, **changes) if changes else base
