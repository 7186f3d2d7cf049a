"""Operator calls fanned out to workers: LoRA adapters at run time, cache flush, profiler.

Each call goes to every chosen worker at once, each with its own deadline; the answer is one
``WorkerOutcome`` per worker (its ``success`` and ``message``, or the failure of the call).
Workers reached through something other than :class:`WireConnection` (test doubles) have no
such calls and are reported as unable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from turnout.wire import WorkerCallError, WorkerClient
from turnout.workers.wire_adapter import WireConnection
from turnout.workers.worker import Worker

__all__ = ["Answer", "WorkerOutcome", "client_of", "fan_out"]


class Answer(Protocol):
    """What the admin RPCs answer: ``success`` and a ``message``."""

    success: bool
    message: str


@dataclass(frozen=True, slots=True)
class WorkerOutcome:
    """What one worker answered an operator call."""

    worker_id: str
    success: bool
    message: str
    #: False when the call itself failed (unreachable, timed out, not implemented).
    answered: bool = True

    def as_dict(self) -> dict[str, Any]:
        """The outcome as the operator routes show it."""
        return {
            "worker": self.worker_id,
            "success": self.success,
            "message": self.message,
            "answered": self.answered,
        }


def client_of(worker: Worker) -> WorkerClient | None:
    """The wire client of ``worker``; None when it is reached some other way."""
    connection = worker.connection
    return connection.client if isinstance(connection, WireConnection) else None


async def fan_out(
    workers: Iterable[Worker],
    call: Callable[[Worker, WorkerClient], Awaitable[Answer]],
) -> list[WorkerOutcome]:
    """Run ``call`` on every worker concurrently (each call carries its own deadline)."""

    async def one(worker: Worker) -> WorkerOutcome:
        client = client_of(worker)
        if client is None:
            return WorkerOutcome(worker.id, False, "not reachable over gRPC", answered=False)
        try:
            answer = await call(worker, client)
        except WorkerCallError as exc:
            return WorkerOutcome(worker.id, False, f"{exc.code.name}: {exc.message}", False)
        return WorkerOutcome(worker.id, bool(answer.success), str(answer.message))

    return list(await asyncio.gather(*(one(w) for w in workers)))
