"""One error type for failed worker calls, and the gRPC status → HTTP status table."""

from __future__ import annotations

from types import MappingProxyType
from typing import ClassVar, Final, Self

import grpc

from turnout.errors import TurnoutError

__all__ = [
    "CLIENT_ERROR_CODES",
    "GRPC_TO_HTTP",
    "ClientClosed",
    "MalformedResponse",
    "StreamRefused",
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

    #: HTTP status of the whole class, when it does not follow from the gRPC status.
    class_http_status: ClassVar[int | None] = None

    def __init__(
        self, code: grpc.StatusCode, message: str, *, worker: str = "", method: str = ""
    ) -> None:
        self.code = code
        self.message = message
        self.worker = worker
        self.method = method
        self.http_status = self.class_http_status or http_status_for(code)
        self.worker_fault = code not in CLIENT_ERROR_CODES
        where = " ".join(part for part in (worker, method) if part)
        super().__init__(f"{where + ': ' if where else ''}{code.name}: {message}")

    def fresh(self) -> Self:
        """A copy without traceback, cause or context: what a call raises each time it
        reports the failure it keeps. Raising the kept error itself would tie its traceback
        (and the frames in it, which reference the call) to the call: a reference cycle,
        garbage that only the cyclic collector frees."""
        copy = type(self).__new__(type(self), *self.args)
        copy.__dict__.update(self.__dict__)
        return copy

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


class MalformedResponse(WorkerCallError):
    """The worker answered something that is not a valid gRPC response: a message that does not
    parse as protobuf, a compressed or truncated message, a body without gRPC framing or status.

    gRPC status as grpc's own client reports it (INTERNAL, or UNKNOWN for a body that is not
    gRPC at all), HTTP 502 whatever it is: the worker, not the request and not the router, is
    broken. It counts as a worker fault.
    """

    class_http_status = 502

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.INTERNAL,
        worker: str = "",
        method: str = "",
    ) -> None:
        super().__init__(code, message, worker=worker, method=method)


class StreamRefused(WorkerCallError):
    """The worker refused the call before processing any of it: its stream was above the
    last-stream-id of a GOAWAY (a graceful connection shutdown), or reset with REFUSED_STREAM.

    Nothing ran on the worker, so the same request may be sent again as it is, to the same
    worker too: the transport opens a new connection for the next call (the refusing one takes no
    new streams). gRPC status UNAVAILABLE (HTTP 503); not a worker fault (the worker closed a
    connection in order, it did not break).
    """

    def __init__(self, message: str, *, worker: str = "", method: str = "") -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, message, worker=worker, method=method)
        self.worker_fault = False


class ClientClosed(WorkerCallError):
    """A call on a client (or transport) that was already closed: UNAVAILABLE, nothing sent."""

    def __init__(self, *, worker: str = "", method: str = "") -> None:
        super().__init__(
            grpc.StatusCode.UNAVAILABLE, "client is closed", worker=worker, method=method
        )
