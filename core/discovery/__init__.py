"""Service discovery: providers (plugins) report workers joining and leaving; the core applies
their changes to the worker registry (:class:`DiscoveryManager`)."""

from turnout.discovery.manager import (
    Backoff,
    DiscoveryManager,
    create_provider,
    describe_discovery,
)
from turnout.discovery.types import (
    Added,
    DiscoveredWorker,
    DiscoveryProvider,
    Draining,
    Removed,
    Role,
    Snapshot,
    WorkerChange,
)

__all__ = [
    "Added",
    "Backoff",
    "DiscoveredWorker",
    "DiscoveryManager",
    "DiscoveryProvider",
    "Draining",
    "Removed",
    "Role",
    "Snapshot",
    "WorkerChange",
    "create_provider",
    "describe_discovery",
]
