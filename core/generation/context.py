"""The per-request facts a generation request carries from the HTTP side."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestContext:
    """Per-request facts: id, headers (lower-cased names), routing key, start time."""

    request_id: str
    headers: Mapping[str, str]
    routing_key: str | None
    #: The id sent to the worker: the request id, made unique when a client chose it (two
    #: clients sending the same ``x-request-id`` must not collide on a worker).
    worker_request_id: str = ""
    #: Size of the request body in bytes (large ones are rendered off the event loop).
    body_size: int = 0
    started: float = field(default_factory=time.monotonic)
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.worker_request_id:
            self.worker_request_id = self.request_id
