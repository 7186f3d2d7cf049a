"""Data-parallel ranks as routing candidates.

An SGLang worker started with ``--dp-size N`` (DP attention) runs N schedulers behind one gRPC
endpoint, each with its own queue and KV cache, and ``GetLoads`` reports each rank's load. Left
to itself its DP controller hands requests out in turn, blind to how long each one is, so one
rank can queue while the others idle. turnout routes to ranks instead: a worker with
``dp_size`` > 1 offers one :class:`DpRank` candidate per rank to the policy, and the chosen rank
goes in ``GenerateRequest.data_parallel_rank``. Health, circuit breaker and retries stay per
worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from turnout.wire.proto.common_pb2 import EngineLoad
    from turnout.workers.kv_index import KvIndex
    from turnout.workers.worker import Worker

__all__ = ["DpRank", "Slot", "candidate_ids", "dp_size_from_labels"]


class Slot(Protocol):
    """Where a request goes: a whole worker, or one DP rank of it."""

    @property
    def id(self) -> str:
        """Candidate id seen by policies."""
        ...

    @property
    def url(self) -> str:
        """The worker's ``grpc://host:port``."""
        ...

    @property
    def worker(self) -> Worker:
        """The worker that serves it."""
        ...

    @property
    def dp_rank(self) -> int | None:
        """The rank to pin, or None (the worker's scheduler decides)."""
        ...

    @property
    def load(self) -> int:
        """Requests in flight from this router plus those the worker reports."""
        ...

    @property
    def in_flight(self) -> int:
        """Requests in flight from this router."""
        ...

    @property
    def engine_load(self) -> EngineLoad | None:
        """The last load record its engine pushed (None: none)."""
        ...

    def acquire(self) -> None:
        """Count a request as in flight."""
        ...

    def release(self) -> None:
        """A request finished (in any way)."""
        ...

    def pin(self, request: Any) -> None:
        """Set (or clear) ``request.data_parallel_rank`` for this slot."""
        ...


class DpRank:
    """Rank ``dp_rank`` of ``worker``; candidate id ``<worker id>@<rank>``."""

    __slots__ = ("_external_load", "_id", "dp_rank", "in_flight", "worker")

    def __init__(self, worker: Worker, dp_rank: int) -> None:
        self.worker = worker
        self.dp_rank = dp_rank
        self._id = f"{worker.id}@{dp_rank}"
        #: Requests from this router on this rank that have not finished.
        self.in_flight = 0
        self._external_load = 0

    @property
    def id(self) -> str:
        """Candidate id: the worker's id and the rank."""
        return self._id

    @property
    def url(self) -> str:
        """The worker's ``grpc://host:port`` (every rank shares it)."""
        return self.worker.url

    @property
    def load(self) -> int:
        """In-flight requests from this router on the rank plus its other reported work."""
        return self.in_flight + self._external_load

    @property
    def kv_index(self) -> KvIndex | None:
        """The blocks this rank's engine reports cached; None when it streams no KV events."""
        kv = self.worker.kv
        if kv is None or not kv.streaming or self.dp_rank >= len(kv.engines):
            return None
        return kv.engines[self.dp_rank].index

    @property
    def engine_load(self) -> EngineLoad | None:
        """The last load record this rank's engine pushed; None when it pushes none (or the
        router does not monitor loads)."""
        kv = self.worker.kv
        if kv is None or not kv.streaming or not kv.count_load or self.dp_rank >= len(kv.engines):
            return None
        return kv.engines[self.dp_rank].load

    def set_reported_load(self, reported: int) -> None:
        """Take the rank's ``GetLoads`` count; our in-flight requests are part of it already."""
        self._external_load = max(0, reported - self.in_flight)

    def acquire(self) -> None:
        """Count a request as in flight on the rank (and the worker)."""
        self.in_flight += 1
        self.worker.acquire()

    def release(self) -> None:
        """A request on the rank finished."""
        self.in_flight = max(0, self.in_flight - 1)
        self.worker.release()

    def pin(self, request: Any) -> None:
        """Route ``request`` to this rank."""
        request.data_parallel_rank = self.dp_rank

    def info(self) -> dict[str, int]:
        """A JSON-ready description for ``GET /workers``."""
        return {"rank": self.dp_rank, "load": self.load, "in_flight": self.in_flight}

    def __repr__(self) -> str:
        return f"DpRank({self._id!r}, load={self.load})"


def dp_size_from_labels(labels: dict[str, str]) -> int:
    """The ``dp_size`` a worker reported (``GetServerInfo`` server args), 1 when unknown."""
    try:
        size = int(labels.get("dp_size", "1"))
    except ValueError:
        return 1
    return max(size, 1)


def candidate_ids(workers: Iterable[Worker]) -> list[str]:
    """Ids of every candidate the ``workers`` offer (a worker, or each of its ranks)."""
    ids: list[str] = []
    for worker in workers:
        ranks: Sequence[DpRank] = worker.ranks
        if ranks:
            ids.extend(rank.id for rank in ranks)
        else:
            ids.append(worker.id)
    return ids
