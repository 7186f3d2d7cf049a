"""What every request handler shares: the app's services; new request ids."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from turnout.config import Config
from turnout.embeddings import Embedder
from turnout.generation.models import ModelTable
from turnout.generation.pipeline import Opener
from turnout.plugin_loader import Plugins


@dataclass(slots=True)
class Services:
    """Long-lived objects owned by the app's lifespan (no module-level globals)."""

    config: Config
    plugins: Plugins
    models: ModelTable
    open_stream: Opener
    embed: Embedder
    #: Set while the server shuts down: readiness fails and new requests are refused.
    draining: bool = False
    extras: dict[str, object] = field(default_factory=dict)


def new_request_id(prefix: str) -> str:
    """A fresh id like ``chatcmpl-<24 hex>``."""
    return f"{prefix}-{secrets.token_hex(12)}"
