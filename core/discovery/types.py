"""The public discovery-provider API: what a discovery plugin implements and emits.

A provider is a long-lived async source of worker changes. turnout creates it from the config
(``discovery: [{provider: NAME, options: {...}}]``) as ``factory(**options)`` and iterates
``provider.watch()`` for the life of the configuration. Each change says what the provider sees;
turnout applies it to its worker registry (providers never touch the registry), so the same
rules hold for every provider: a draining worker gets no new requests while its in-flight ones
finish, a removed worker is drained and then dropped, a full :class:`Snapshot` reconciles.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from turnout.workers.roles import Role

__all__ = [
    "Added",
    "DiscoveredWorker",
    "DiscoveryProvider",
    "Draining",
    "Removed",
    "Role",
    "Snapshot",
    "WorkerChange",
]


@dataclass(frozen=True, slots=True)
class DiscoveredWorker:
    """A worker as a provider sees it.

    ``key`` identifies it within its provider for good (a Kubernetes pod UID, a file entry's
    id or URL): changes name it by key. ``name`` is the worker id shown by ``GET /workers``
    (default: ``host:port``). ``model`` None lets turnout ask the worker (``GetModelInfo``).
    ``bootstrap_port`` is the prefill server's KV bootstrap port (prefill workers only).
    """

    key: str
    url: str
    model: str | None = None
    role: Role = Role.REGULAR
    name: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    bootstrap_port: int | None = None


@dataclass(frozen=True, slots=True)
class Added:
    """The worker is up and may take requests (repeating it with the same fields is a no-op;
    with other fields, the old worker is drained and the new one added)."""

    worker: DiscoveredWorker


@dataclass(frozen=True, slots=True)
class Draining:
    """The worker is going away or not ready: no new requests, in-flight ones finish. It stays
    registered until :class:`Removed`, or takes requests again on a new :class:`Added`."""

    key: str


@dataclass(frozen=True, slots=True)
class Removed:
    """The worker is gone: it is drained (in-flight requests finish) and then dropped."""

    key: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the provider sees now: ``workers`` are up, ``draining`` keys are not ready;
    any other worker this provider added before is removed. Emit one after every full re-read
    (a re-list, a file read) so that a missed change cannot leave a stale worker."""

    workers: tuple[DiscoveredWorker, ...]
    draining: frozenset[str] = frozenset()


WorkerChange = Added | Draining | Removed | Snapshot


@runtime_checkable
class DiscoveryProvider(Protocol):
    """A discovery provider: one instance per ``discovery`` config entry.

    ``watch()`` yields changes until it is cancelled (turnout closes the iterator on shutdown
    and on a reload that drops the entry). If it raises, turnout logs the error and calls
    ``watch()`` again after a back-off, so the stream should start with a :class:`Snapshot`.
    Anything that can block (file or network I/O) must be awaited, never done inline.
    Optional: a ``describe() -> str`` method, a one-line summary shown by ``turnout check``.
    """

    def watch(self) -> AsyncIterator[WorkerChange]:
        """The provider's changes, for as long as it runs."""
        ...
