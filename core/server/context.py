"""What every request handler shares: the app's services and the per-request context."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from turnout.config import Config
from turnout.plugin_loader import Plugins
from turnout.server.models import ModelTable
from turnout.server.pipeline import Opener


@dataclass(slots=True)
class Services:
    """Long-lived objects owned by the app's lifespan (no module-level globals)."""

    config: Config
    plugins: Plugins
    models: ModelTable
    open_stream: Opener
    #: Set while the server shuts down: readiness fails and new requests are refused.
    draining: bool = False
    extras: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class RequestContext:
    """Per-request facts: id, headers (lower-cased names), routing key, start time."""

    request_id: str
    headers: Mapping[str, str]
    routing_key: str | None
    #: The id sent to the worker: the request id, made unique when a client chose it (two
    #: clients sending the same ``x-request-id`` must not collide on a worker).
    worker_request_id: str = ""
    started: float = field(default_factory=time.monotonic)
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.worker_request_id:
            self.worker_request_id = self.request_id


def new_request_id(prefix: str) -> str:
    """A fresh id like ``chatcmpl-<24 hex>``."""
    return f"{prefix}-{secrets.token_hex(12)}"
