"""Errors of the worker layer; each carries the HTTP status and OpenAI error code to answer with."""

from __future__ import annotations

from turnout.errors import TurnoutError

#: OpenAI error ``type`` per HTTP status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "internal_server_error",
    501: "not_implemented_error",
    502: "upstream_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


def error_type_for(status: int) -> str:
    """The OpenAI error ``type`` for an HTTP status."""
    return ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


class DispatchError(TurnoutError):
    """A request could not be served by any worker; ``status``/``code``/``error_type`` say how
    to answer (OpenAI error body)."""

    status = 503
    code = "service_unavailable"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code

    @property
    def error_type(self) -> str:
        """OpenAI error ``type``."""
        return error_type_for(self.status)


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
    worker fault (5xx-class, transport) from a client error (4xx). ``message`` is what the
    client may see (no worker address); ``detail`` is the full story for the logs.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        worker_fault: bool,
        worker_id: str | None = None,
        attempts: int = 1,
        detail: str | None = None,
    ) -> None:
        code = "upstream_error" if worker_fault or status >= 500 else "invalid_request"
        super().__init__(message, status=status, code=code)
        self.worker_fault = worker_fault
        self.worker_id = worker_id
        self.attempts = attempts
        self.detail = detail or message


class WorkerNotFound(TurnoutError):
    """No registered worker has that id."""


class WorkerConflict(TurnoutError):
    """A worker with that id or URL is already registered."""
