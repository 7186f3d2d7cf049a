"""What every request handler shares: the app's services (by dependency injection); request ids."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from turnout.config import Config
from turnout.discovery import DiscoveryManager
from turnout.embeddings import Embedder
from turnout.generation.models import ModelTable
from turnout.generation.pipeline import Opener
from turnout.http_workers.relay import HttpRelay
from turnout.observability.logs import new_request_id
from turnout.plugin_loader import Plugins
from turnout.routing.dispatch import Dispatcher
from turnout.server.middleware import OpsState
from turnout.workers.registry import WorkerRegistry

__all__ = ["SERVICES", "ConfigSource", "ReloadAll", "Services", "ServicesSlot", "new_request_id"]

#: Where the config comes from again on a reload (``POST /admin/reload``, SIGHUP).
ConfigSource = Callable[[], Config]
#: Reloads every serving process of the router; returns what changed (see ``Services``).
ReloadAll = Callable[[], Awaitable[dict[str, Any]]]

#: The dependency name handlers take the services under: ``services: NamedDependency[Services]``.
SERVICES = "services"

if TYPE_CHECKING:
    from turnout.observability.otel import Tracing
else:
    # The name must resolve at run time (dependency injection reads the field types), but
    # importing the real class would load OpenTelemetry's SDK while tracing is off.
    Tracing = Any


@dataclass(slots=True)
class Services:
    """Long-lived objects owned by the app's lifespan (no module-level globals). A reload swaps
    ``config`` and ``models`` (and the dispatcher's policies) in place."""

    config: Config
    plugins: Plugins
    models: ModelTable
    open_stream: Opener
    embed: Embedder
    registry: WorkerRegistry
    dispatcher: Dispatcher
    discovery: DiscoveryManager
    #: Per-app operating state: admission gate, API keys, metrics, the draining flag.
    ops: OpsState
    #: None when turnout was started without a config file (nothing to reload).
    config_source: ConfigSource | None = None
    #: Set in each of several serving processes: reloads the config in all of them (through
    #: their supervisor) and returns what changed; ``config_source`` is then unused.
    reload_all: ReloadAll | None = None
    #: OpenTelemetry tracing; None while it is off.
    tracing: Tracing | None = None
    #: Forwards the requests of models served by HTTP workers (None: not set up).
    http_relay: HttpRelay | None = None

    @property
    def migration_attempts(self) -> int:
        """Migrations a request may make (0: failover is off)."""
        migration = self.config.migration
        return migration.max_attempts if migration.enabled else 0

    @property
    def draining(self) -> bool:
        """True while the server shuts down: readiness fails and new requests are refused."""
        return self.ops.draining


class ServicesSlot:
    """The provider of the ``services`` dependency: the lifespan fills it, handlers get it."""

    __slots__ = ("services",)

    def __init__(self) -> None:
        self.services: Services | None = None

    def __call__(self) -> Services:
        services = self.services
        if services is None:
            raise RuntimeError("the app's services are not up (its lifespan has not started)")
        return services
