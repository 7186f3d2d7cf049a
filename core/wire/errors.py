"""One error type for failed worker calls, and the gRPC status → HTTP status table."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

import grpc

from turnout.errors import TurnoutError

__all__ = [
    "CLIENT_ERROR_CODES",
    "GRPC_TO_HTTP",
    "WorkerCallError",
    "http_status_for",
]

#: How a worker's gRPC status surfaces to turnout's HTTP clients; anything not listed is 500.
GRPC_TO_HTTP: Final = MappingProxyType(
    {
        grpc.StatusCode.INVALID_ARGUMENT: 400,
        grpc.StatusCode.NOT_FOUND: 404,
        grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
        grpc.StatusCode.UNIMPLEMENTED: 501,
        grpc.StatusCode.UNAVAILABLE: 503,
        grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    }
)

#: Statuses that blame the request, not the worker: they must not count against a worker's
#: circuit breaker and retrying them on another worker would fail the same way.
CLIENT_ERROR_CODES: Final = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


def http_status_for(code: grpc.StatusCode) -> int:
    """HTTP status turnout answers with when a worker call ends with ``code``."""
    return GRPC_TO_HTTP.get(code, 500)


class WorkerCallError(TurnoutError):
    """A call to a worker failed (gRPC status, transport failure or deadline).

    ``worker_fault`` is True when the worker (or the way to it) is to blame — unreachable,
    overloaded, internal error, deadline — and False when the request itself was refused
    (``CLIENT_ERROR_CODES``). Circuit breakers count only worker faults.
    """

    def __init__(
        self, code: grpc.StatusCode, message: str, *, worker: str = "", method: str = ""
    ) -> None:
        self.code = code
        self.message = message
        self.worker = worker
        self.method = method
        self.http_status = http_status_for(code)
        self.worker_fault = code not in CLIENT_ERROR_CODES
        where = " ".join(part for part in (worker, method) if part)
        super().__init__(f"{where + ': ' if where else ''}{code.name}: {message}")

    @classmethod
    def from_rpc_error(
        cls, error: grpc.aio.AioRpcError, *, worker: str = "", method: str = ""
    ) -> WorkerCallError:
        """Wrap a ``grpc.aio.AioRpcError``."""
        code = error.code()
        details = error.details() or ""
        return cls(
            code if isinstance(code, grpc.StatusCode) else grpc.StatusCode.UNKNOWN,
            details,
            worker=worker,
            method=method,
        )
