"""The public selection-policy API: what a policy plugin implements.

The router calls a policy once per request with the request's routing facts and the workers that
may serve it: only healthy workers with a closed (or half-open) circuit that serve the requested
model. A policy instance serves one model and is created once at start-up (or on config reload)
by ``load_plugins().policies.create(name, **params)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(slots=True, frozen=True)
class RoutingRequest:
    """What a policy may look at to choose a worker."""

    model: str
    token_ids: Sequence[int] = ()
    text: str | None = None
    #: Request headers, names lower-cased.
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Value of the configured routing-key header (``x-routing-key`` by default), if any.
    routing_key: str | None = None
    #: The LoRA adapter the request runs with (``model: "base:adapter"``), if any. Only workers
    #: with it loaded are candidates; policies may keep requests of one adapter together
    #: (:class:`turnout.routing.AdapterAffinity`).
    adapter: str | None = None


@runtime_checkable
class Candidate(Protocol):
    """A worker a policy may pick, or one data-parallel rank of a worker (``<worker>@<rank>``)."""

    @property
    def id(self) -> str:
        """Stable candidate id (unique in this router)."""
        ...

    @property
    def url(self) -> str:
        """The worker's ``grpc://host:port`` address."""
        ...

    @property
    def load(self) -> int:
        """In-flight requests from this router plus the worker's own running/queued count."""
        ...


@runtime_checkable
class Policy(Protocol):
    """A selection policy. It may also implement the optional hooks :class:`WatchesWorkers`
    and :class:`WatchesOutcomes` (just define the method): the router looks them up once per
    policy instance, not per request."""

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Choose one of ``candidates`` (never empty) for ``request``."""
        ...


@runtime_checkable
class WatchesWorkers(Protocol):
    """The optional hook of a policy that keeps state per candidate (a hash ring, a prefix
    tree): told the candidates of its model when it starts and whenever they change."""

    def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
        """``worker_ids``: the ids of every candidate of the model now."""
        ...


@runtime_checkable
class WatchesOutcomes(Protocol):
    """The optional hook of a policy that learns from outcomes: told of every request it
    routed once it ended (failed attempts included)."""

    def on_request_done(self, request: RoutingRequest, worker_id: str, ok: bool) -> None:
        """``request`` ended on candidate ``worker_id``: well (``ok``) or with a failure."""
        ...
