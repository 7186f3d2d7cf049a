"""The waiting requests of one class: those with a deadline by deadline (least slack first, as
every request of a class expects the same time to first token), the others shared fairly
between tenants by token work.

Fair share is start-time fair queueing over token work: a request of tenant ``t`` (weight
``w``) with work ``c`` starts at ``max(V, F_t)`` and moves ``F_t`` to that plus ``c / w``; the
waiting request with the earliest start goes first and moves the class's virtual time ``V`` to
its start. A tenant of long prompts so advances its own clock faster than one of short prompts,
and both get the same tokens per second at equal weight. When a request ends, the difference
between its real usage and its expected work is settled on its tenant's clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnout.admission.ticket import Ticket


class FairQueue:
    """The waiting tickets of one class (see the module doc)."""

    __slots__ = ("_deadlined", "_finish", "_seq", "_tenants", "size", "vtime")

    def __init__(self) -> None:
        #: The class's virtual time: the start tag of the last request admitted.
        self.vtime = 0.0
        #: Each tenant's virtual finish (kept while the app lives: tenants are configured).
        self._finish: dict[str, float] = {}
        #: Waiting tickets without a deadline, per tenant, in tag order.
        self._tenants: dict[str, deque[Ticket]] = {}
        #: Waiting tickets with a deadline: (deadline, arrival number, ticket).
        self._deadlined: list[tuple[float, int, Ticket]] = []
        self._seq = itertools.count()
        #: Tickets waiting.
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def charge(self, tenant: str, weight: float, work: int) -> float:
        """Book ``work`` tokens for ``tenant``; the start tag of that work."""
        start = max(self.vtime, self._finish.get(tenant, 0.0))
        self._finish[tenant] = start + work / weight
        return start

    def settle(self, tenant: str, weight: float, delta: int) -> None:
        """Correct ``tenant``'s clock by ``delta`` tokens (real usage less the expected work)."""
        if tenant in self._finish:
            self._finish[tenant] += delta / weight

    def push(self, ticket: Ticket, *, front: bool = False) -> None:
        """Queue ``ticket`` (``front``: ahead of its tenant's others, a preempted one)."""
        self.size += 1
        if ticket.deadline_at is not None:
            heapq.heappush(self._deadlined, (ticket.deadline_at, next(self._seq), ticket))
            return
        queue = self._tenants.get(ticket.tenant)
        if queue is None:
            queue = self._tenants[ticket.tenant] = deque()
        if front:
            queue.appendleft(ticket)
        else:
            queue.append(ticket)

    def head(self) -> Ticket | None:
        """The ticket that goes next (None: none waits)."""
        deadlined = self._deadlined
        if deadlined:
            return deadlined[0][2]
        best: Ticket | None = None
        for queue in self._tenants.values():
            if queue and (best is None or queue[0].tag < best.tag):
                best = queue[0]
        return best

    def pop(self) -> Ticket | None:
        """Take the ticket that goes next out of the queue."""
        ticket = self.head()
        if ticket is None:
            return None
        self.size -= 1
        if ticket.deadline_at is not None:
            heapq.heappop(self._deadlined)
        else:
            self._tenants[ticket.tenant].popleft()
            self.vtime = max(self.vtime, ticket.tag)
        return ticket

    def remove(self, ticket: Ticket) -> None:
        """Take ``ticket`` out wherever it waits (it gave up); queues are bounded: linear."""
        if ticket.deadline_at is not None:
            for index, entry in enumerate(self._deadlined):
                if entry[2] is ticket:
                    self._deadlined.pop(index)
                    heapq.heapify(self._deadlined)
                    self.size -= 1
                    return
            return
        queue = self._tenants.get(ticket.tenant)
        if queue is not None and ticket in queue:
            queue.remove(ticket)
            self.size -= 1

    def tickets(self) -> list[Ticket]:
        """Every waiting ticket (for draining)."""
        found = [entry[2] for entry in self._deadlined]
        for queue in self._tenants.values():
            found.extend(queue)
        return found
