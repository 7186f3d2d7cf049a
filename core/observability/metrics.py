"""Prometheus metrics (``turnout_*``): request counts and latencies, time to first token,
inter-token latency, tokens, in-flight requests, admission, retries, routing decisions, parser
errors, and worker health/load/circuit collected from the registry at scrape time.

Each app owns a :class:`Metrics` with its own ``CollectorRegistry`` (several apps can live in
one process, e.g. in tests). When ``PROMETHEUS_MULTIPROC_DIR`` is set before
``prometheus_client`` is imported, values go to that directory and a scrape of any process
aggregates all of them (several uvicorn worker processes).
"""

from __future__ import annotations

import copy
import os
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
    values,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from turnout.errors import ParserError
from turnout.observability.logs import RequestRecord, current_record

CONTENT_TYPE = CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600)
TTFT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1.0)
#: Inter-token latencies reach the histogram at most this long (s) after they were measured.
ITL_FLUSH_S = 1.0

#: Paths that get their own ``route`` label; anything else is folded (bounded label values).
_ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/conversations",
        "/generate",
        "/v1/embeddings",
        "/v1/models",
        "/v1/tokenize",
        "/v1/detokenize",
        "/health",
        "/liveness",
        "/readiness",
        "/health_generate",
        "/metrics",
        "/get_model_info",
        "/get_server_info",
        "/parse/function_call",
        "/parse/reasoning",
        "/workers",
    }
)


def route_label(path: str) -> str:
    """The ``route`` label of a request path (bounded set of values)."""
    if path in _ROUTES:
        return path
    if path.startswith("/workers/"):
        return "/workers/{id}"
    if path.startswith("/v1/models/"):
        return "/v1/models/{model}"
    if path.startswith("/v1/responses/"):
        return "/v1/responses/{id}"
    if path.startswith("/v1/conversations/"):
        return "/v1/conversations/{id}"
    return "other"


#: The status label of a request that ended this way, whatever status was sent.
_OUTCOME_STATUS = {"timeout": "504", "client_gone": "499"}

H = TypeVar("H")


class Children(Generic[H]):
    """The labelled children of one metric, each looked up once and wrapped in a handle
    (``make``: :class:`Tally`, :class:`Level` or :class:`Buckets`): prometheus_client's
    ``labels`` checks and locks on every call, and the hot path needs several per request.
    Holds as many children as the metric itself (label values are bounded sets)."""

    __slots__ = ("_cache", "_make", "_metric")

    def __init__(self, metric: MetricWrapperBase, make: Callable[[Any], H]) -> None:
        self._metric = metric
        self._make = make
        self._cache: dict[tuple[str, ...], H] = {}

    def __call__(self, *values: str) -> H:
        """The handle of the child of these label values."""
        handle = self._cache.get(values)
        if handle is None:
            handle = self._cache[values] = self._make(self._metric.labels(*values))
        return handle


class Tally:
    """Adds to one labelled counter child straight through its value.

    prometheus_client's ``Counter.inc`` checks, on every call, that the metric has its labels
    and that the amount is not negative; a child taken from :class:`Children` has its labels,
    and the hot path only adds counts. The value object (``values.ValueClass``: a float under a
    lock, or a memory-mapped file in multiprocess mode) is the one the child reports.
    """

    __slots__ = ("_value",)

    def __init__(self, child: Counter) -> None:
        self._value = child._value

    def inc(self, amount: float = 1) -> None:
        """Add ``amount`` (not negative)."""
        self._value.inc(amount)


class Level:
    """Raises and lowers one labelled gauge child straight through its value (see
    :class:`Tally`; ``Gauge.inc`` and ``dec`` also check the gauge's multiprocess mode)."""

    __slots__ = ("_value",)

    def __init__(self, child: Gauge) -> None:
        self._value = child._value

    def inc(self) -> None:
        """One more."""
        self._value.inc(1)

    def dec(self) -> None:
        """One fewer."""
        self._value.inc(-1)


class Buckets:
    """Observes into one labelled histogram child straight through its values: the sum, and
    the first bucket whose upper bound is not below the amount (found by bisection rather than
    ``Histogram.observe``'s walk over the bounds)."""

    __slots__ = ("_buckets", "_sum", "bounds")

    def __init__(self, child: Histogram) -> None:
        #: The buckets' upper bounds, the last one infinite.
        self.bounds: list[float] = child._upper_bounds
        self._buckets = child._buckets
        self._sum = child._sum

    def observe(self, amount: float) -> None:
        """One observation of ``amount`` (a finite number)."""
        self._sum.inc(amount)
        self._buckets[bisect_left(self.bounds, amount)].inc(1)

    def observe_counted(self, counts: list[int], total: float) -> None:
        """Observations tallied by the caller: ``counts[i]`` of them fell in bucket ``i`` (the
        first whose bound is not below the amount: ``bisect_left(bounds, amount)``), and
        ``total`` is their sum."""
        self._sum.inc(total)
        for value, count in zip(self._buckets, counts, strict=True):
            if count:
                value.inc(count)


class _ModelMeters:
    """What a :class:`RequestMeter` observes for one model, resolved once per model."""

    __slots__ = ("generation", "itl", "prompt", "ttft")

    def __init__(self, metrics: Metrics, model: str) -> None:
        self.ttft = Buckets(metrics.ttft.labels(model))
        self.itl = Buckets(metrics.itl.labels(model))
        self.prompt = Tally(metrics.prompt_tokens.labels(model))
        self.generation = Tally(metrics.generation_tokens.labels(model))


#: Whether a label's value is hidden from a scrape: ``hidden(label, value)``.
HiddenLabel = Callable[[str, str], bool]


class _Without(Collector):
    """The metrics of ``source`` without the samples that carry a hidden label value."""

    def __init__(self, source: CollectorRegistry, hidden: HiddenLabel) -> None:
        self._source = source
        self._hidden = hidden

    def collect(self) -> Iterable[Metric]:
        hidden = self._hidden
        for family in self._source.collect():
            shown = copy.copy(family)
            shown.samples = [
                sample
                for sample in family.samples
                if not any(hidden(label, value) for label, value in sample.labels.items())
            ]
            yield shown


def multiprocess_mode() -> bool:
    """True when prometheus_client writes values to ``PROMETHEUS_MULTIPROC_DIR``."""
    return values.ValueClass is not values.MutexValue


class Metrics:
    """Every turnout metric of one app."""

    def __init__(self) -> None:
        registry = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "turnout_requests",
            "HTTP requests answered, by route, model and status",
            ["route", "model", "status"],
            registry=registry,
        )
        self.request_duration = Histogram(
            "turnout_request_duration_seconds",
            "End-to-end request latency (until the last byte of the answer)",
            ["route", "model"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "turnout_requests_in_flight",
            "HTTP requests being served",
            ["route"],
            multiprocess_mode="livesum",
            registry=registry,
        )
        self.ttft = Histogram(
            "turnout_time_to_first_token_seconds",
            "Time from request arrival to the first generated token from the worker",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.itl = Histogram(
            "turnout_inter_token_latency_seconds",
            "Time between streamed chunks divided by the tokens in the chunk (one per chunk)",
            ["model"],
            buckets=ITL_BUCKETS,
            registry=registry,
        )
        self.prompt_tokens = Counter(
            "turnout_prompt_tokens", "Prompt tokens processed", ["model"], registry=registry
        )
        self.generation_tokens = Counter(
            "turnout_generation_tokens", "Tokens generated", ["model"], registry=registry
        )
        self.retries = Counter(
            "turnout_retries",
            "Worker attempts retried on another worker before the first response",
            ["model"],
            registry=registry,
        )
        self.routed = Counter(
            "turnout_routed_requests",
            "Requests the selection policy placed on each worker (the attempt that streamed)",
            ["model", "worker"],
            registry=registry,
        )
        self.parser_errors = Counter(
            "turnout_parser_errors",
            "Requests during which a tool-call or reasoning parser raised, by parser",
            ["model", "kind", "name"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "turnout_admission_queue_depth",
            "Requests waiting for a concurrency permit",
            multiprocess_mode="livesum",
            registry=registry,
        )
        self.rejected = Counter(
            "turnout_admission_rejected",
            "Requests refused by admission control, by reason",
            ["reason"],
            registry=registry,
        )
        # Tenant label values are tenant names from the config only (bounded).
        self.tenant_requests = Counter(
            "turnout_tenant_requests",
            "HTTP requests authenticated by a tenant's key, by tenant and status",
            ["tenant", "status"],
            registry=registry,
        )
        self.tenant_tokens = Counter(
            "turnout_tenant_tokens",
            "Tokens used by a tenant's requests (kind: prompt or completion)",
            ["tenant", "kind"],
            registry=registry,
        )
        self.tenant_rejected = Counter(
            "turnout_tenant_rejected",
            "Requests refused by a tenant's limits (limit: requests, tokens, concurrency, or "
            "storage when the budget storage is unreachable and failing closed)",
            ["tenant", "limit"],
            registry=registry,
        )
        self.workers = WorkerCollector()
        registry.register(self.workers)
        # Children of the metrics observed on every request.
        self.requests_of = Children(self.requests, Tally)
        self.request_duration_of = Children(self.request_duration, Buckets)
        self.in_flight_of = Children(self.in_flight, Level)
        self.routed_of = Children(self.routed, Tally)
        #: Per (route, model, status): the request count and the duration histogram.
        self._answered: dict[tuple[str, str, str], tuple[Tally, Buckets]] = {}
        self._model_meters: dict[str, _ModelMeters] = {}

    # -- per request ---------------------------------------------------------------------------

    def observe_request(self, record: RequestRecord, duration_s: float) -> None:
        """Count one finished request (once, at its end)."""
        route = route_label(record.path)
        model = record.model or ""
        status = _OUTCOME_STATUS.get(record.outcome) or str(record.status)
        key = (route, model, status)
        answered = self._answered.get(key)
        if answered is None:
            answered = self._answered[key] = (
                self.requests_of(route, model, status),
                self.request_duration_of(route, model),
            )
        count, durations = answered
        count.inc()
        durations.observe(duration_s)
        if record.parser_error is not None:
            kind, name = record.parser_error
            self.parser_errors.labels(model, kind, name).inc()
        tenant = record.tenant
        if tenant is not None:
            self.tenant_requests.labels(tenant, status).inc()
            if record.prompt_tokens:
                self.tenant_tokens.labels(tenant, "prompt").inc(record.prompt_tokens)
            if record.completion_tokens:
                self.tenant_tokens.labels(tenant, "completion").inc(record.completion_tokens)

    def meter(self, model: str, record: RequestRecord | None) -> RequestMeter:
        """Per-request observation of a worker stream, with the model's children bound once
        (``record``: the request whose log line gets its time to first token and tokens)."""
        meters = self._model_meters.get(model)
        if meters is None:
            meters = self._model_meters[model] = _ModelMeters(self, model)
        return RequestMeter(meters, record)

    # -- scraping ------------------------------------------------------------------------------

    def render(self, hidden: HiddenLabel | None = None) -> bytes:
        """The Prometheus text exposition of every metric (all processes in multiprocess mode);
        without the samples ``hidden`` says one of whose labels is hidden, when given."""
        if not multiprocess_mode():
            registry = self.registry
        else:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            registry.register(self.workers)
        if hidden is not None:
            shown = CollectorRegistry()
            shown.register(_Without(registry, hidden))
            registry = shown
        return generate_latest(registry)

    @staticmethod
    def process_exit() -> None:
        """In multiprocess mode, drop this process's live gauges (call when it stops)."""
        if multiprocess_mode():
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


class RequestMeter:
    """Times one worker stream: time to first token, inter-token latency, tokens in and out.

    Fed by the generation pipeline's one walk over the worker's responses
    (:class:`turnout.generation.pipeline.StreamMeter`); labelled children are looked up once
    per request. The inter-token latencies are tallied here, one bucket count per batch of
    worker messages that brought tokens, and added to the histogram at most
    ``ITL_FLUSH_S`` later (and when the stream ends): the histogram's values each take a lock
    per addition, which per batch cost more than the rest of the observation.
    """

    __slots__ = (
        "_done",
        "_flush_at",
        "_itl",
        "_itl_sum",
        "_last",
        "_meters",
        "_record",
        "_used",
    )

    def __init__(self, meters: _ModelMeters, record: RequestRecord | None) -> None:
        self._meters = meters
        self._record = record
        self._last: float | None = None
        self._used = 0
        self._done = False
        #: Inter-token latencies not in the histogram yet: count per bucket, and their sum.
        self._itl: list[int] | None = None
        self._itl_sum = 0.0
        #: When (``perf_counter``) the tallied latencies go to the histogram next.
        self._flush_at = 0.0

    def arrived(self, streamed: int, at: float) -> None:
        """A batch of worker messages brought tokens at ``at`` (``time.perf_counter()``):
        ``streamed`` of them in stream chunks, 0 when a whole output came in one message.

        The first batch gives the time to first token; later ones one inter-token latency
        observation each: the time since the previous batch divided by its tokens.
        """
        last = self._last
        if last is None:
            record = self._record
            if record is not None:
                ttft = at - record.started
                record.ttft_s = ttft
                self._meters.ttft.observe(ttft)
            self._flush_at = at + ITL_FLUSH_S
        elif streamed:
            itl = (at - last) / streamed
            bounds = self._meters.itl.bounds
            counts = self._itl
            if counts is None:
                counts = self._itl = [0] * len(bounds)
            counts[bisect_left(bounds, itl)] += 1
            self._itl_sum += itl
            if at >= self._flush_at:
                self._flush_itl()
                self._flush_at = at + ITL_FLUSH_S
        self._last = at
        self._used += streamed

    def _flush_itl(self) -> None:
        """Add the tallied inter-token latencies to the histogram."""
        counts = self._itl
        if counts is not None:
            self._itl = None
            self._meters.itl.observe_counted(counts, self._itl_sum)
            self._itl_sum = 0.0

    def usage(self) -> int:
        """Tokens of the stream: prompt plus generated (a tenant's real usage); before the
        stream ended, the tokens streamed so far."""
        return self._used

    def finish(self, prompt_tokens: int, generated: int) -> None:
        """Add the stream's tokens to the counters (once)."""
        if self._done:
            return
        self._done = True
        self._used = prompt_tokens + generated
        self._flush_itl()
        meters = self._meters
        meters.prompt.inc(prompt_tokens)
        meters.generation.inc(generated)
        record = self._record
        if record is not None:
            record.prompt_tokens += prompt_tokens
            record.completion_tokens += generated


class WorkerCollector(Collector):
    """Worker health, load and circuit state, read from the registry at scrape time."""

    def __init__(self) -> None:
        self._source: Callable[[], Iterable[Any]] | None = None

    def attach(self, workers: Callable[[], Iterable[Any]]) -> None:
        """Read workers from ``workers()`` (the registry's ``all``) from now on."""
        self._source = workers

    def detach(self) -> None:
        """Stop reporting workers."""
        self._source = None

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        labels = ["worker", "model"]
        healthy = GaugeMetricFamily(
            "turnout_worker_healthy", "1 if the worker passes health checks", labels=labels
        )
        routable = GaugeMetricFamily(
            "turnout_worker_routable",
            "1 if the worker takes new requests (ready, circuit not open, not draining)",
            labels=labels,
        )
        state = GaugeMetricFamily(
            "turnout_worker_state",
            "Worker lifecycle state (1 for the current state)",
            labels=[*labels, "state"],
        )
        circuit = GaugeMetricFamily(
            "turnout_worker_circuit_state",
            "Circuit breaker state (1 for the current state)",
            labels=[*labels, "state"],
        )
        load = GaugeMetricFamily(
            "turnout_worker_load", "In-flight requests plus reported load", labels=labels
        )
        in_flight = GaugeMetricFamily(
            "turnout_worker_in_flight", "Requests of this router in flight", labels=labels
        )
        requests = CounterMetricFamily(
            "turnout_worker_requests", "Requests started on the worker", labels=labels
        )
        failures = CounterMetricFamily(
            "turnout_worker_failures", "Worker faults recorded", labels=labels
        )
        source = self._source
        for worker in source() if source is not None else ():
            key = [worker.id, worker.model_id or ""]
            healthy.add_metric(key, 1.0 if worker.health.state.value == "healthy" else 0.0)
            routable.add_metric(key, 1.0 if worker.routable else 0.0)
            current = worker.state.value
            for name in ("pending", "ready", "unhealthy", "draining"):
                state.add_metric([*key, name], 1.0 if name == current else 0.0)
            breaker = worker.breaker.state.value
            for name in ("closed", "open", "half_open"):
                circuit.add_metric([*key, name], 1.0 if name == breaker else 0.0)
            load.add_metric(key, float(worker.load))
            in_flight.add_metric(key, float(worker.in_flight))
            requests.add_metric(key, float(worker.requests_total))
            failures.add_metric(key, float(worker.failures_total))
        return [healthy, routable, state, circuit, load, in_flight, requests, failures]


def note_parser_error(error: ParserError) -> None:
    """Mark the current request as failed inside a parser (counted once per request in
    ``turnout_parser_errors_total`` with the parser's kind and registered name)."""
    record = current_record()
    if record is not None and record.parser_error is None:
        record.parser_error = (error.kind, error.name)


def note_stream_cut(status: int) -> None:
    """The current request's stream ended with an error event after its 200 went out (a worker
    failed mid-stream, say): it is logged and counted with ``status`` and the outcome
    ``stream_error``, not as a 200."""
    record = current_record()
    if record is not None:
        record.status = status
        record.outcome = "stream_error"


def note_failure(exc: BaseException) -> None:
    """Note an error that ended a request: a :class:`ParserError` is counted as above."""
    if isinstance(exc, ParserError):
        note_parser_error(exc)
