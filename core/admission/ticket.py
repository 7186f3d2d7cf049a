"""One generation request's place in admission, from its arrival to its end."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import TYPE_CHECKING

from turnout.wire.proto import sglang_scheduler_pb2 as pb

if TYPE_CHECKING:
    from turnout.admission.scheduler import Scheduler


class Stage(enum.Enum):
    """Where a ticket is."""

    NEW = "new"  # not asked for admission yet (its prompt is being prepared)
    QUEUED = "queued"
    ADMITTED = "admitted"  # holds capacity, no first token yet: may be preempted
    STARTED = "started"  # its first token came
    DONE = "done"


class Ticket:
    """A request's class, tenant, deadline and token work, and where it is (:class:`Stage`).

    The gate middleware makes it and :meth:`release` s it when the request ends; the step to
    the workers calls :meth:`admit` (waits for capacity) and :meth:`started`."""

    __slots__ = (
        "admitted_at",
        "arrived",
        "cls",
        "deadline_at",
        "deadline_ms",
        "preemptions",
        "queued_since",
        "scheduler",
        "stage",
        "tag",
        "tenant",
        "usage",
        "waiter",
        "weight",
        "work",
        "yield_signal",
        "yielding",
    )

    def __init__(
        self,
        scheduler: Scheduler,
        cls: int,
        tenant: str,
        *,
        weight: float,
        arrived: float,
        deadline_ms: int | None,
    ) -> None:
        self.scheduler = scheduler
        #: Rank of its class (0: highest).
        self.cls = cls
        #: Its tenant's name ("" untenanted): the fair share's and the metrics' key.
        self.tenant = tenant
        self.weight = weight
        #: Loop time of its arrival.
        self.arrived = arrived
        self.deadline_ms = deadline_ms
        #: Loop time by which its first token is due (None: no deadline).
        self.deadline_at = None if deadline_ms is None else arrived + deadline_ms / 1000
        self.stage = Stage.NEW
        #: Token work charged to its tenant (prompt plus expected output, each call).
        self.work = 0
        #: Its fair-share start tag.
        self.tag = 0.0
        #: Its real usage so far (prompt plus completion), set once a worker answers.
        self.usage: Callable[[], int] | None = None
        self.queued_since = arrived
        self.admitted_at = arrived
        self.waiter: asyncio.Future[None] | None = None
        #: Set when a higher class takes its place (while :attr:`yielding`).
        self.yield_signal: asyncio.Future[None] | None = None
        self.yielding = False
        self.preemptions = 0

    async def admit(self, work: int) -> None:
        """Wait for capacity for ``work`` more tokens (at once when already admitted)."""
        await self.scheduler.admit(self, work)

    def preemption(self) -> asyncio.Future[None] | None:
        """What is set when this request must yield its place (None: it cannot be preempted)."""
        return self.scheduler.preemption(self)

    async def requeue(self) -> None:
        """Give the place back after a preemption and wait to be admitted again."""
        await self.scheduler.requeue(self)

    def started(self) -> None:
        """Its first token came: it keeps its place now."""
        self.scheduler.started(self)

    def unpreemptible(self) -> None:
        """Its worker call failed before its first token: no preemption from now on."""
        self.scheduler.unpreemptible(self)

    def release(self) -> None:
        """The request ended (idempotent)."""
        self.scheduler.close(self)


def token_work(request: pb.GenerateRequest, expected_output: int) -> int:
    """Prompt tokens plus ``n`` times ``max_tokens`` (``expected_output`` without it)."""
    params = request.sampling_params
    output = params.max_new_tokens if params.HasField("max_new_tokens") else expected_output
    return len(request.tokenized.input_ids) + max(1, params.n) * output
