"""One registered worker: identity, health, circuit, load."""

from __future__ import annotations

import asyncio
import enum
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from turnout.deadlines import Deadline
from turnout.http_workers.kind import is_http_worker
from turnout.wire.proto.common_pb2 import EngineLoad
from turnout.workers.adapters import Adapter
from turnout.workers.breaker import CircuitBreaker, CircuitState
from turnout.workers.connection import Streaming, WorkerConnection
from turnout.workers.dp import DpRank, dp_size_from_labels
from turnout.workers.health import HealthState, HealthTracker
from turnout.workers.ids import default_worker_id
from turnout.workers.kv_events import KvSubscriber
from turnout.workers.kv_index import KvIndex
from turnout.workers.roles import (
    DEFAULT_BOOTSTRAP_PORT,
    Role,
    bootstrap_port_from_labels,
    role_from_labels,
)
from turnout.workers.settings import (
    BreakerSettings,
    HealthSettings,
    WorkerSpec,
    apply_override,
)

_HEALTHY = HealthState.HEALTHY
_CLOSED = CircuitState.CLOSED

#: Model id of a worker that reports none.
UNKNOWN_MODEL = "unknown"


class WorkerState(enum.StrEnum):
    """Lifecycle state shown by ``GET /workers``; only ``ready`` workers get new requests."""

    PENDING = "pending"
    READY = "ready"
    UNHEALTHY = "unhealthy"
    DRAINING = "draining"


def model_id_from_labels(labels: dict[str, str]) -> str:
    """Model id from discovered labels: served name, then model id, then model path."""
    for key in ("served_model_name", "model_id", "model_path"):
        value = labels.get(key)
        if value:
            return value
    return UNKNOWN_MODEL


class Worker:
    """A worker as the router sees it; implements :class:`turnout.routing.Candidate`.

    A worker with ``dp_size`` > 1 is routed to rank by rank: its :attr:`ranks` are the
    candidates (see :mod:`turnout.workers.dp`); otherwise the worker itself is.
    """

    #: A whole worker pins no DP rank (its own scheduler decides).
    dp_rank: int | None = None

    def __init__(
        self,
        spec: WorkerSpec,
        connection: WorkerConnection,
        health: HealthSettings,
        breaker: BreakerSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        #: An OpenAI-compatible HTTP server (:mod:`turnout.http_workers`), not a gRPC worker.
        self.http = is_http_worker(spec)
        self._id = spec.id or default_worker_id(spec.url)
        self._url = spec.url
        self.connection = connection
        self.health = HealthTracker(apply_override(health, spec.health))
        self.breaker = CircuitBreaker(apply_override(breaker, spec.circuit_breaker), clock)
        #: Labels: discovered model/server info, then the spec's labels on top.
        self.labels: dict[str, str] = dict(spec.labels)
        #: Served model id, known once configured or discovered.
        self.model_id: str | None = spec.model
        #: Its part in prefill-decode disaggregation: configured, else what it reports.
        self.role: Role = spec.role or Role.REGULAR
        self.discovered = False
        self.draining = False
        self.removed = False
        #: Requests from this router that have not finished.
        self.in_flight = 0
        self._clock = clock
        self._external_load = 0
        self.requests_total = 0
        self.failures_total = 0
        self.last_error: str | None = None
        self.added_at = time.time()
        #: Set to make the health loop probe now.
        self.wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        #: One candidate per DP rank when the worker has more than one; else empty.
        self.ranks: tuple[DpRank, ...] = ()
        self._set_dp_size(spec.dp_size or 1)
        #: The LoRA adapters it reported, by name; None: it did not say (the model's configured
        #: adapters are taken to be loaded).
        self.adapters: dict[str, Adapter] | None = None
        #: Its KV-event subscription, once started (see :mod:`turnout.workers.kv_events`).
        self.kv: KvSubscriber | None = None
        #: Why it is out of rotation on what its event stream says (wedged, stale), or None.
        self.vetoed: str | None = None
        #: The waits of requests for its first response: cut short when it is vetoed.
        self.first_waits: dict[Deadline, None] = {}
        #: Its answers being streamed: those that fall silent while it is vetoed are cut (they
        #: go on elsewhere, see :meth:`cut_silent`).
        self.running: weakref.WeakSet[Streaming] = weakref.WeakSet()

    @property
    def id(self) -> str:
        """Stable worker id."""
        return self._id

    @property
    def worker(self) -> Worker:
        """Itself (a worker is its own routing slot when it has no DP ranks)."""
        return self

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks requests are routed to (1: the worker as a whole)."""
        return len(self.ranks) or 1

    @property
    def url(self) -> str:
        """``grpc://host:port``."""
        return self._url

    @property
    def load(self) -> int:
        """In-flight requests from this router plus the worker's other reported work."""
        return self.in_flight + self._external_load

    @property
    def bootstrap_host(self) -> str:
        """Where decode workers reach a prefill worker's KV bootstrap server: its host."""
        return urlsplit(self._url).hostname or ""

    @property
    def bootstrap_port(self) -> int:
        """A prefill worker's KV bootstrap port: configured, else reported, else 8998."""
        return (
            self.spec.bootstrap_port
            or bootstrap_port_from_labels(self.labels)
            or DEFAULT_BOOTSTRAP_PORT
        )

    @property
    def state(self) -> WorkerState:
        """Lifecycle state."""
        if self.draining:
            return WorkerState.DRAINING
        health = self.health.state
        if health is HealthState.HEALTHY and self.model_id is not None:
            return WorkerState.READY
        if health is HealthState.UNHEALTHY or self.vetoed is not None:
            return WorkerState.UNHEALTHY
        return WorkerState.PENDING

    @property
    def routable(self) -> bool:
        """Whether the worker may take a new request now."""
        # Called per request for every worker of the model: plain attribute reads only on the
        # common path (properties and enum look-ups cost ~10x more on CPython 3.11).
        if (
            self.draining
            or self.model_id is None
            or self.health._state is not _HEALTHY
            or self.vetoed is not None
        ):
            return False
        breaker = self.breaker
        if breaker._state is _CLOSED:
            return True
        # Half-open: one trial request at a time, so that a worker that still hangs holds up
        # one request rather than its whole share of the traffic until the trial fails.
        return breaker.allows() and (self.in_flight == 0 or not breaker.settings.enabled)

    def apply_discovery(self, labels: dict[str, str]) -> bool:
        """Take discovered labels; configured labels, model id, role and ``dp_size`` win.

        Returns True when the worker's candidates changed (its DP size did).
        """
        merged = dict(labels)
        merged.update(self.spec.labels)
        self.labels = merged
        self.model_id = self.spec.model or model_id_from_labels(merged)
        self.role = self.spec.role or role_from_labels(merged)
        self.discovered = True
        return self._set_dp_size(self.spec.dp_size or dp_size_from_labels(merged))

    def _set_dp_size(self, size: int) -> bool:
        if size == self.dp_size:
            return False
        self.ranks = tuple(DpRank(self, rank) for rank in range(size)) if size > 1 else ()
        return True

    def set_reported_load(self, reported: Sequence[int]) -> None:
        """Take ``GetLoads`` counts (running plus waiting) by DP rank; our own in-flight
        requests are part of them already."""
        ranks = self.ranks
        if ranks and len(reported) == len(ranks):
            for rank, count in zip(ranks, reported, strict=True):
                rank.set_reported_load(count)
            self._external_load = sum(rank.load - rank.in_flight for rank in ranks)
        else:
            self._external_load = max(0, sum(reported) - self.in_flight)

    def take_pushed_load(self, rank: int, count: int) -> None:
        """Take the running plus waiting count that DP rank ``rank`` pushed on the event
        stream (as :meth:`set_reported_load` does for a polled one)."""
        ranks = self.ranks
        if ranks:
            if 0 <= rank < len(ranks):
                ranks[rank].set_reported_load(count)
                self._external_load = sum(r.load - r.in_flight for r in ranks)
        elif rank == 0:
            self._external_load = max(0, count - self.in_flight)

    @property
    def pushes_load(self) -> bool:
        """Whether its load arrives on its event stream (then it is not polled)."""
        kv = self.kv
        return kv is not None and kv.streaming and kv.engines[0].load is not None

    @property
    def kv_index(self) -> KvIndex | None:
        """The blocks its engine reports cached; None when it streams no KV events."""
        kv = self.kv
        return kv.engines[0].index if kv is not None and kv.streaming else None

    @property
    def engine_load(self) -> EngineLoad | None:
        """The last load record its engine pushed; None when it pushes none (or the router
        does not monitor loads: ``load_monitor.enabled``)."""
        kv = self.kv
        return kv.engines[0].load if kv is not None and kv.streaming and kv.count_load else None

    def veto(self, reason: str | None) -> bool:
        """Take it out of rotation for ``reason`` (None: put it back); requests waiting for
        its first response stop waiting (they are retried elsewhere). Returns True when the
        verdict changed."""
        was, self.vetoed = self.vetoed, reason
        if reason is None or was is not None:
            return (was is None) != (reason is None)
        self.last_error = f"out of rotation: {reason}"
        waits, self.first_waits = self.first_waits, {}
        for wait in waits:
            wait.cut()
        return True

    def cut_silent(self) -> int:
        """Cut the answers it streams that received nothing since the last call (called
        while it is vetoed: a wedged or stopped engine sends nothing, a working one does);
        returns how many were cut."""
        cut = 0
        for stream in list(self.running):
            if stream.heard:
                stream.heard = False
            else:
                stream.cut(self.vetoed or "out of rotation")
                cut += 1
        return cut

    def pin(self, request: Any) -> None:
        """Leave the DP rank of ``request`` to the worker (``ClearField``: also for messages
        whose rank field has no presence, as ``EmbedRequest``'s)."""
        request.ClearField("data_parallel_rank")

    def has_adapter(self, name: str) -> bool:
        """Whether the worker can serve LoRA adapter ``name`` (as far as the router knows)."""
        adapters = self.adapters
        return adapters is None or name in adapters

    def pin_adapter(self, request: Any, name: str, default_id: str) -> None:
        """Name LoRA adapter ``name`` in ``request.lora_id`` by this worker's id for it, or by
        ``default_id`` (the configured one) when the worker did not report one."""
        adapters = self.adapters
        adapter = adapters.get(name) if adapters is not None else None
        request.lora_id = adapter.lora_id if adapter is not None and adapter.lora_id else default_id

    def acquire(self) -> None:
        """Count a request as in flight."""
        kv = self.kv
        if kv is not None and kv.unanswered_since is None:
            # The request moves the worker's load record: its stream owes a record now.
            kv.unanswered_since = self._clock()
        self.in_flight += 1
        self.requests_total += 1
        self._idle.clear()

    def release(self) -> None:
        """A request finished (in any way)."""
        self.in_flight -= 1
        if self.in_flight <= 0:
            self.in_flight = 0
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return when no request of this router is in flight on the worker."""
        await self._idle.wait()

    def info(self) -> dict[str, Any]:
        """A JSON-ready description for ``GET /workers``."""
        return {
            "id": self.id,
            "url": self.url,
            **({"kind": "http"} if self.http else {}),
            "model": self.model_id,
            "role": self.role.value,
            **({"bootstrap_port": self.bootstrap_port} if self.role is Role.PREFILL else {}),
            "state": self.state.value,
            "health": self.health.state.value,
            "circuit": self.breaker.state.value,
            "load": self.load,
            "in_flight": self.in_flight,
            "requests_total": self.requests_total,
            "failures_total": self.failures_total,
            "consecutive_failures": self.breaker.consecutive_failures,
            "last_error": self.last_error,
            "labels": dict(self.labels),
            "dp_size": self.dp_size,
            "dp_ranks": [rank.info() for rank in self.ranks],
            "adapters": None if self.adapters is None else sorted(self.adapters),
            "vetoed": self.vetoed,
            "kv_events": self.kv is not None and self.kv.streaming,
        }
