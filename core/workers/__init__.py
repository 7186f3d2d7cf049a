"""Workers: the fleet — registry, health, circuit breakers, connections and retry settings.

Choosing a worker and dispatching a request to it is :mod:`turnout.routing`; the ``/workers``
admin routes are :mod:`turnout.server.worker_routes`.
"""

from turnout.workers.breaker import CircuitBreaker, CircuitState
from turnout.workers.errors import (
    DispatchError,
    NoWorkerAvailable,
    WorkerConflict,
    WorkerNotFound,
    WorkerRequestError,
)
from turnout.workers.health import HealthState
from turnout.workers.registry import WorkerRegistry
from turnout.workers.settings import (
    BreakerOverride,
    BreakerSettings,
    HealthOverride,
    HealthSettings,
    LoadMonitorSettings,
    RetrySettings,
    WorkerSpec,
    WorkersSettings,
)
from turnout.workers.worker import Worker, WorkerState

__all__ = [
    "BreakerOverride",
    "BreakerSettings",
    "CircuitBreaker",
    "CircuitState",
    "DispatchError",
    "HealthOverride",
    "HealthSettings",
    "HealthState",
    "LoadMonitorSettings",
    "NoWorkerAvailable",
    "RetrySettings",
    "Worker",
    "WorkerConflict",
    "WorkerNotFound",
    "WorkerRegistry",
    "WorkerRequestError",
    "WorkerSpec",
    "WorkerState",
    "WorkersSettings",
]
