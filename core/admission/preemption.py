"""A worker call of an admitted request that a higher class may preempt before its first token:
the call is cancelled (which aborts the request on the worker), the request goes back to the
queue and, once admitted again, is sent again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from turnout.admission.ticket import Ticket
from turnout.tasks import cancel_and_wait

T = TypeVar("T")


async def open_admitted(ticket: Ticket, work: int, start: Callable[[], Awaitable[T]]) -> T:
    """Admit ``ticket`` for ``work`` tokens, then ``start()`` the worker call (it returns once
    the first response came): again after each preemption. The call runs in a task of its own
    only while the ticket may be preempted."""
    await ticket.admit(work)
    while True:
        signal = ticket.preemption()
        if signal is None:
            result = await start()
            ticket.started()
            return result
        call = asyncio.ensure_future(start())
        either: set[asyncio.Future[Any]] = {call, signal}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            await cancel_and_wait(call)
            raise
        if not call.done():
            await cancel_and_wait(call)
        if call.cancelled():
            await ticket.requeue()
            continue
        if call.exception() is not None:
            ticket.unpreemptible()
        result = call.result()  # raises its error; else it answered first: it keeps its place
        ticket.started()
        return result
