"""Workers: registry, health, circuit breakers, retries and the request dispatcher.

The admin routes live in :mod:`turnout.workers.routes` (imported separately: Litestar).
"""

from turnout.workers.breaker import CircuitBreaker, CircuitState
from turnout.workers.dispatch import Dispatcher, GenerateSession
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
    "Dispatcher",
    "GenerateSession",
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
