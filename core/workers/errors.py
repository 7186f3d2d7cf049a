"""Errors of the worker layer; each carries the HTTP status and OpenAI error code to answer with."""

from __future__ import annotations

from turnout.errors import TurnoutError


class DispatchError(TurnoutError):
    """A request could not be served by any worker."""

    status = 503
    code = "service_unavailable"
    error_type = "service_unavailable"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code


class NoWorkerAvailable(DispatchError):
    """No routable worker serves the model (none registered, all down, open or draining).

    Fails fast: raised without waiting for a worker to come up.
    """

    code = "no_available_workers"

    def __init__(self, model: str, reason: str) -> None:
        super().__init__(f"no worker available for model {model!r}: {reason}")
        self.model = model
        self.reason = reason


class WorkerRequestError(DispatchError):
    """The worker answered with an error (a client error, or the last of the retried faults).

    ``status`` is the HTTP status mapped from the worker's error; ``worker_fault`` tells a
    worker fault (5xx-class, transport) from a client error (4xx).
    """

    error_type = "upstream_error"

    def __init__(
        self,
        message: str,
        *,
        status: int,
        worker_fault: bool,
        worker_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        code = "upstream_error" if worker_fault else "invalid_request"
        super().__init__(message, status=status, code=code)
        if not worker_fault:
            self.error_type = "invalid_request_error"
        self.worker_fault = worker_fault
        self.worker_id = worker_id
        self.attempts = attempts


class WorkerNotFound(TurnoutError):
    """No registered worker has that id."""


class WorkerConflict(TurnoutError):
    """A worker with that id or URL is already registered."""
