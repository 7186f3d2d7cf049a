"""Errors of the worker layer. Those a client sees are :class:`~turnout.errors.ApiError`\\ s:
the app answers them as they are (status, code; the type from the one status table)."""

from __future__ import annotations

from turnout.errors import ApiError, TurnoutError


class DispatchError(ApiError):
    """A request could not be served by any worker (an OpenAI error answer, 503 by default)."""

    status = 503
    code = "service_unavailable"

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None):
        cls = type(self)
        super().__init__(cls.status if status is None else status, message, code=code or cls.code)


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
    """A worker call failed: how it counts for the worker and what the client is told.

    Made once from the worker's error (``WorkerConnection.classify``) and raised as it is,
    after the dispatcher noted the worker and the attempts. ``status`` is the HTTP status mapped
    from the worker's error. ``worker_fault`` (transport errors, UNAVAILABLE, 5xx-class) feeds
    the circuit breaker and may be retried elsewhere; client errors (4xx) do not. ``retryable``:
    another worker may succeed. ``refused``: the worker refused the call before running any of
    it (a graceful GOAWAY, REFUSED_STREAM), so it may be sent again as it is, to the same worker
    too. ``message`` is what the client sees (never the worker's address); ``detail`` the full
    story for the logs and ``GET /workers``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        worker_fault: bool,
        retryable: bool = False,
        refused: bool = False,
        detail: str | None = None,
        worker_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        code = "upstream_error" if worker_fault or status >= 500 else "invalid_request"
        super().__init__(message, status=status, code=code)
        self.worker_fault = worker_fault
        self.retryable = retryable
        self.refused = refused
        self.detail = detail or message
        self.worker_id = worker_id
        self.attempts = attempts

    def on(self, worker_id: str, attempts: int) -> WorkerRequestError:
        """This error, noted as the failure of ``worker_id`` at attempt ``attempts``."""
        self.worker_id = worker_id
        self.attempts = attempts
        return self


class WorkerNotFound(TurnoutError):
    """No registered worker has that id."""


class WorkerConflict(TurnoutError):
    """A worker with that id or URL is already registered."""


class KvEventsUnsupported(Exception):
    """The worker does not serve ``SubscribeKvEvents`` (UNIMPLEMENTED)."""


class KvEventsLost(Exception):
    """The worker cannot resume a KV-event subscription (``OUT_OF_RANGE``) or lost events
    itself (``DATA_LOSS``): subscribe anew from now, with the index rebuilt."""
