"""What the worker layer needs from a worker's gRPC client, and how failures are classified.

The registry and dispatcher only talk to :class:`WorkerConnection`; :func:`connect` adapts the
wire client (``turnout.wire``) to it, and tests may pass their own ``connect``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class ResponseStream(Protocol):
    """A started ``Generate`` call, read in batches; ``aclose()`` cancels it."""

    async def next_batch(self) -> list[Any]:
        """Every response that arrived since the last call (waiting for one if none did); an
        empty list once the stream ended."""
        ...

    async def aclose(self) -> None:
        """Cancel the call (the worker aborts the request)."""
        ...


class WorkerConnection(Protocol):
    """The calls the worker layer makes to one worker."""

    async def health_check(self, timeout_s: float) -> bool:
        """``HealthCheck`` RPC: True iff the worker answered healthy within ``timeout_s``."""
        ...

    async def model_info(self, timeout_s: float) -> Mapping[str, str]:
        """``GetModelInfo`` + ``GetServerInfo`` flattened into string labels."""
        ...

    async def load(self, timeout_s: float) -> Sequence[int]:
        """``GetLoads``: running plus waiting requests of each DP rank (index = rank)."""
        ...

    def generate(
        self, request: Any, timeout: float | None, metadata: Sequence[tuple[str, str]] = ()
    ) -> ResponseStream:
        """Start ``Generate`` with an overall deadline ``timeout`` seconds from now (None: none),
        sending ``metadata`` (gRPC metadata: the W3C trace context) with it."""
        ...

    def classify(self, exc: BaseException) -> Failure | None:
        """How ``exc`` raised by a call of this connection counts; None: not a worker error."""
        ...

    async def close(self) -> None:
        """Close the channel."""
        ...


@dataclass(frozen=True, slots=True)
class Failure:
    """How an exception from a worker call counts."""

    #: True for transport errors, UNAVAILABLE, 5xx-class statuses: they feed the circuit
    #: breaker and may be retried elsewhere. False for client errors (bad request, ...).
    worker_fault: bool
    #: HTTP status the client would see.
    status: int
    #: What happened, for logs and ``GET /workers`` (it may name the worker's address).
    message: str
    #: Whether another worker may succeed (408/429/5xx and transport errors).
    retryable: bool
    #: What the client is told: never the worker's address (the log line with the request id
    #: has it). Empty: a text derived from ``status``.
    public: str = ""
    #: The worker refused the call before running any of it (a graceful GOAWAY, REFUSED_STREAM):
    #: it may be sent again as it is, to the same worker too (on a new connection).
    refused: bool = False

    def client_message(self) -> str:
        """The error text for the client."""
        return self.public or f"the worker failed the request (HTTP {self.status})"
