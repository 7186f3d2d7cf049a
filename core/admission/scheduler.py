"""Who is admitted next, and who yields its place (see docs/admission.md).

Capacity is ``min(server.max_concurrent_requests, what the engines' pushed loads allow)``; a
class's ``hold`` keeps that share of it free for the class and those above. When a place is
free, a class below its reserved share with work waiting goes first (the highest such
class); otherwise the class whose head ranks highest, a head rising one class per ``aging_s``
it has waited (no class starves). Inside a class, :class:`~turnout.admission.fair.FairQueue`
picks. A request that must wait while a lower class above its reserve holds a place that has
produced no first token yet makes that request yield (it goes back to its queue, ahead of its
tenant's others). Shed: a full class queue (429), a class queue timeout (503), a deadline that
cannot be met any more (503, early: when the measured drain rate says it will not be admitted
in time, else when its time is up), each with ``Retry-After`` from the drain rate.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

from turnout.admission.classes import DEADLINE_HEADER, PRIORITY_HEADER, ClassTable, deadline_ms
from turnout.admission.drain import DrainMeter
from turnout.admission.fair import FairQueue
from turnout.admission.metrics import AdmissionMetrics
from turnout.admission.refusals import ClassQueueFull, ClassQueueTimeout, DeadlineUnmeetable
from turnout.admission.settings import AdmissionSettings
from turnout.admission.ticket import Stage, Ticket
from turnout.errors import ApiError
from turnout.tasks import cancel_and_wait

#: The wait assumed for ``Retry-After`` while no drain rate is measured (seconds).
_UNKNOWN_WAIT_S = 1.0


class Draining(ApiError):
    """503: the router is shutting down."""

    def __init__(self) -> None:
        super().__init__(503, "turnout is shutting down", code="shutting_down")


class Scheduler:
    """The admission of one app's generation requests (see the module doc)."""

    def __init__(
        self,
        settings: AdmissionSettings,
        hard_limit: int,
        metrics: AdmissionMetrics | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.settings = settings
        self.classes = list(settings.classes)
        self.table = ClassTable(settings)
        self.hard_limit = hard_limit
        #: Requests the engines can take now (None: they do not limit).
        self.capacity: Callable[[], float] | None = None
        self.metrics = metrics
        self.drain = DrainMeter()
        self._clock = clock
        count = len(self.classes)
        self._queues = [FairQueue() for _ in range(count)]
        #: Admitted tickets by class.
        self._active = [0] * count
        #: Admitted tickets without a first token, by class, oldest first (preemption victims).
        self._unstarted: list[dict[Ticket, None]] = [{} for _ in range(count)]
        #: Tickets told to yield that have not yet.
        self._yielding = 0
        self._ticker: asyncio.Task[None] | None = None
        self.draining = False
        #: The request headers a ticket is made from (lower-case names).
        self.wanted_headers = frozenset({PRIORITY_HEADER, DEADLINE_HEADER})

    # -- the request's side ----------------------------------------------------------------------

    def ticket(
        self, headers: dict[bytes, bytes], tenant: str, cap: str | None, weight: float
    ) -> Ticket:
        """A new request's ticket from its headers (lower-case names), its tenant (""
        untenanted), the tenant's class cap and weight; 400 on a bad header."""
        cls = self.table.resolve(headers.get(PRIORITY_HEADER), cap)
        deadline = deadline_ms(headers.get(DEADLINE_HEADER))
        return Ticket(self, cls, tenant, weight=weight, arrived=self._now(), deadline_ms=deadline)

    def successor(self, ticket: Ticket) -> Ticket:
        """A new ticket of ``ticket``'s class, tenant and weight, arriving now and without a
        deadline: for work a request leaves behind (a background response)."""
        return Ticket(
            self,
            ticket.cls,
            ticket.tenant,
            weight=ticket.weight,
            arrived=self._now(),
            deadline_ms=None,
        )

    def _now(self) -> float:
        clock = self._clock
        return clock() if clock is not None else asyncio.get_running_loop().time()

    @property
    def active(self) -> int:
        """Requests admitted now."""
        return sum(self._active)

    @property
    def waiting(self) -> int:
        """Requests waiting now."""
        return sum(len(queue) for queue in self._queues)

    def limit(self) -> float:
        """Requests that may be admitted at once now."""
        limit = float(self.hard_limit) if self.hard_limit > 0 else math.inf
        capacity = self.capacity
        if capacity is not None:
            limit = min(limit, capacity())
        return limit

    def _reserve(self, cls: int, limit: float) -> float:
        share = self.classes[cls].share
        if share <= 0:
            return 0
        if math.isinf(limit):
            return math.inf
        return max(1, math.floor(share * limit))

    def _room(self, cls: int, limit: float) -> float:
        """Places class ``cls`` may take now: the free ones less those held for higher classes
        that do not use them (``hold``)."""
        room = limit - self.active
        for higher in range(cls):
            hold = self.classes[higher].hold
            if hold > 0 and not math.isinf(limit):
                room -= max(0, max(1, math.floor(hold * limit)) - self._active[higher])
        return room

    async def admit(self, ticket: Ticket, work: int) -> None:
        """Admit ``ticket`` for ``work`` more tokens: at once, after waiting, or refused."""
        queue = self._queues[ticket.cls]
        if ticket.stage in (Stage.ADMITTED, Stage.STARTED):
            queue.charge(ticket.tenant, ticket.weight, work)
            ticket.work += work
            return
        if ticket.stage is not Stage.NEW:
            return  # its request ended (work it left running, e.g. in the background, is free)
        ticket.tag = queue.charge(ticket.tenant, ticket.weight, work)
        ticket.work = work
        now = self._now()
        if not self.waiting and self._room(ticket.cls, self.limit()) > 0:
            self._grant(ticket, now)
            return
        try:
            if self.draining:  # nothing waits while the router shuts down
                self._shed(ticket, "shutting_down")
                raise Draining()
            self._refuse_early(ticket, now)
        except ApiError:
            queue.settle(ticket.tenant, ticket.weight, -work)
            raise
        await self._wait(ticket, now)

    def preemption(self, ticket: Ticket) -> asyncio.Future[None] | None:
        """The future set when ``ticket`` must yield; None when it cannot be preempted."""
        if (
            ticket.stage is not Stage.ADMITTED
            or ticket.cls == 0
            or ticket.preemptions >= self.settings.max_preemptions
        ):
            return None
        signal = ticket.yield_signal
        if signal is None or (signal.done() and not ticket.yielding):
            signal = ticket.yield_signal = asyncio.get_running_loop().create_future()
        return signal

    async def requeue(self, ticket: Ticket) -> None:
        """``ticket`` yielded (its worker call is aborted): back to the queue, then admitted."""
        if ticket.stage is not Stage.ADMITTED:
            return
        self._unhold(ticket)
        ticket.preemptions += 1
        if self.metrics is not None:
            self.metrics.preempted.labels(self.classes[ticket.cls].name, ticket.tenant).inc()
        now = self._now()
        self._queues[ticket.cls].push(ticket, front=True)
        self._queued(ticket, now, requeued=True)
        self._pump(now)
        if not _holds(ticket):  # not admitted again at once
            await self._await_grant(ticket, now)

    def started(self, ticket: Ticket) -> None:
        """``ticket``'s first token came: it keeps its place."""
        if ticket.stage is not Stage.ADMITTED:
            return
        ticket.stage = Stage.STARTED
        self._unstarted[ticket.cls].pop(ticket, None)
        now = self._now()
        self.drain.first_token(now - ticket.admitted_at)
        if ticket.yielding:  # it answered before it could yield: ask another
            ticket.yielding = False
            self._yielding -= 1
            self._preempt_for_waiting()

    def unpreemptible(self, ticket: Ticket) -> None:
        """``ticket``'s worker call failed before its first token: it keeps its place until it
        ends (what follows is not a call a preemption could abort)."""
        if ticket.stage is not Stage.ADMITTED:
            return
        self._unstarted[ticket.cls].pop(ticket, None)
        ticket.yield_signal = None
        if ticket.yielding:
            ticket.yielding = False
            self._yielding -= 1
            self._preempt_for_waiting()

    def close(self, ticket: Ticket) -> None:
        """The request ended, however (idempotent)."""
        stage = ticket.stage
        if stage is Stage.DONE:
            return
        ticket.stage = Stage.DONE
        if stage is Stage.QUEUED:
            self._queues[ticket.cls].remove(ticket)
            self._gauge(ticket.cls)
            return
        if stage is Stage.NEW:
            return
        self._unhold(ticket)
        now = self._now()
        self.drain.ended(now)
        usage = ticket.usage
        if usage is not None:
            self._queues[ticket.cls].settle(ticket.tenant, ticket.weight, usage() - ticket.work)
        self._pump(now)

    def reject_waiting(self) -> None:
        """Refuse every waiting request with 503 (the router is shutting down)."""
        self.draining = True
        for queue in self._queues:
            for ticket in queue.tickets():
                waiter = ticket.waiter
                if waiter is not None and not waiter.done():
                    waiter.set_exception(Draining())

    async def aclose(self) -> None:
        """Stop the capacity re-checks."""
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            await cancel_and_wait(ticker)

    # -- waiting ---------------------------------------------------------------------------------

    def _refuse_early(self, ticket: Ticket, now: float) -> None:
        """429 when its class queue is full; 503 when its deadline cannot be met."""
        cls = self.classes[ticket.cls]
        queue = self._queues[ticket.cls]
        if len(queue) >= cls.queue_size:
            self._shed(ticket, "queue_full")
            raise ClassQueueFull(cls.name, len(queue), self._retry_wait(now))
        if ticket.deadline_at is None:
            return
        ahead = sum(len(q) for q in self._queues[: ticket.cls + 1]) + 1
        wait = self.drain.wait_s(ahead, now)
        due = now + (wait or 0.0) + self.drain.ttft_s
        if due > ticket.deadline_at:
            self._shed(ticket, "deadline_unmeetable")
            raise DeadlineUnmeetable(ticket.deadline_ms or 0, self._retry_wait(now))

    async def _wait(self, ticket: Ticket, now: float) -> None:
        self._queues[ticket.cls].push(ticket)
        self._queued(ticket, now, requeued=False)
        self._pump(now)
        if ticket.stage is Stage.ADMITTED:
            return
        self._maybe_preempt(ticket)
        await self._await_grant(ticket, now)

    def _queued(self, ticket: Ticket, now: float, *, requeued: bool) -> None:
        ticket.stage = Stage.QUEUED
        if not requeued:
            ticket.queued_since = now
        ticket.waiter = asyncio.get_running_loop().create_future()
        self._gauge(ticket.cls)
        if self.capacity is not None and self._ticker is None and not self.draining:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _await_grant(self, ticket: Ticket, since: float) -> None:
        """Wait until ``ticket`` is admitted, within its class timeout and its deadline."""
        cls = self.classes[ticket.cls]
        waiter = ticket.waiter
        assert waiter is not None
        timeout_at = since + cls.queue_timeout_s if cls.queue_timeout_s > 0 else math.inf
        give_up_at = math.inf
        if ticket.deadline_at is not None:
            give_up_at = ticket.deadline_at - self.drain.ttft_s
        until = min(timeout_at, give_up_at)
        try:
            if math.isinf(until):
                await waiter
            else:
                async with asyncio.timeout_at(until):
                    await waiter
        except TimeoutError:
            if ticket.stage is Stage.ADMITTED:
                return  # admitted as the time ran out: keep it
            self._leave_queue(ticket)
            now = self._now()
            if give_up_at <= timeout_at:
                self._shed(ticket, "deadline_unmeetable")
                raise DeadlineUnmeetable(ticket.deadline_ms or 0, self._retry_wait(now)) from None
            self._shed(ticket, "queue_timeout")
            raise ClassQueueTimeout(cls.name, cls.queue_timeout_s, self._retry_wait(now)) from None
        except Draining:
            self._leave_queue(ticket)
            self._shed(ticket, "shutting_down")
            raise
        except BaseException:
            if ticket.stage is Stage.QUEUED:
                self._leave_queue(ticket)
            raise

    def _leave_queue(self, ticket: Ticket) -> None:
        if ticket.stage is Stage.QUEUED:
            self._queues[ticket.cls].remove(ticket)
            ticket.stage = Stage.DONE
            self._gauge(ticket.cls)

    async def _tick(self) -> None:
        """While requests wait, look at the engines' loads again now and then."""
        interval = self.settings.recheck_interval_s
        try:
            while self.waiting and not self.draining:
                await asyncio.sleep(interval)
                self._pump(self._now())
        finally:
            if self._ticker is asyncio.current_task():
                self._ticker = None

    # -- granting --------------------------------------------------------------------------------

    def _pump(self, now: float) -> None:
        """Admit waiting tickets while there is capacity."""
        if not self.waiting:
            self._set_capacity()
            return
        limit = self._set_capacity()
        while self.active < limit:
            cls = self._pick(limit, now)
            if cls is None:
                return
            ticket = self._queues[cls].pop()
            assert ticket is not None
            self._gauge(cls)
            self._grant(ticket, now)

    def _set_capacity(self) -> float:
        limit = self.limit()
        if self.metrics is not None:
            self.metrics.capacity.set(-1 if math.isinf(limit) else limit)
        return limit

    def _pick(self, limit: float, now: float) -> int | None:
        """The class whose head goes next (None: none waits)."""
        queues = self._queues
        open_ = [bool(queue) and self._room(cls, limit) > 0 for cls, queue in enumerate(queues)]
        for cls in range(len(queues)):
            if open_[cls] and self._active[cls] < self._reserve(cls, limit):
                return cls
        aging = self.settings.aging_s
        best: int | None = None
        best_rank = math.inf
        for cls, queue in enumerate(queues):
            head = queue.head()
            if head is None or not open_[cls]:
                continue
            rank = float(cls)
            if aging > 0:
                rank -= math.floor((now - head.queued_since) / aging)
            if rank < best_rank:
                best, best_rank = cls, rank
        return best

    def _grant(self, ticket: Ticket, now: float) -> None:
        ticket.stage = Stage.ADMITTED
        ticket.admitted_at = now
        self._active[ticket.cls] += 1
        self._unstarted[ticket.cls][ticket] = None
        metrics = self.metrics
        if metrics is not None:
            labels = (self.classes[ticket.cls].name, ticket.tenant)
            metrics.admitted.labels(*labels).inc()
            metrics.queue_time.labels(*labels).observe(now - ticket.arrived)
        waiter = ticket.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _unhold(self, ticket: Ticket) -> None:
        """``ticket`` gives its place back."""
        self._active[ticket.cls] -= 1
        self._unstarted[ticket.cls].pop(ticket, None)
        if ticket.yielding:
            ticket.yielding = False
            self._yielding -= 1

    # -- preemption ------------------------------------------------------------------------------

    def _maybe_preempt(self, ticket: Ticket) -> None:
        """Make a lower-class request without a first token yield to ``ticket`` (one victim per
        waiting request of a class that may preempt)."""
        if not self.classes[ticket.cls].preempt:
            return
        entitled = sum(
            len(self._queues[c]) for c in range(ticket.cls + 1) if self.classes[c].preempt
        )
        if self._yielding >= entitled:
            return
        limit = self.limit()
        for cls in range(len(self.classes) - 1, ticket.cls, -1):
            unstarted = self._unstarted[cls]
            if not unstarted:
                continue
            yielding = sum(1 for t in unstarted if t.yielding)
            if self._active[cls] - yielding <= self._reserve(cls, limit):
                continue  # its reserved share stays
            for victim in reversed(unstarted):  # the latest admitted loses least
                signal = victim.yield_signal
                if victim.yielding or signal is None or signal.done():
                    continue
                victim.yielding = True
                self._yielding += 1
                signal.set_result(None)
                return

    def _preempt_for_waiting(self) -> None:
        for cls, queue in enumerate(self._queues):
            head = queue.head()
            if head is not None and self.classes[cls].preempt:
                self._maybe_preempt(head)
                return

    # -- accounting ------------------------------------------------------------------------------

    def _retry_wait(self, now: float) -> float:
        wait = self.drain.wait_s(self.waiting + 1, now)
        return _UNKNOWN_WAIT_S if wait is None else wait

    def _shed(self, ticket: Ticket, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.shed.labels(self.classes[ticket.cls].name, ticket.tenant, reason).inc()

    def _gauge(self, cls: int) -> None:
        if self.metrics is not None:
            self.metrics.waiting.labels(self.classes[cls].name).set(len(self._queues[cls]))


def _holds(ticket: Ticket) -> bool:
    """Whether ``ticket`` holds a place now (a function: the stage changes behind calls)."""
    return ticket.stage is Stage.ADMITTED
