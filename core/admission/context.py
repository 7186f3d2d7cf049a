"""The admission ticket of the request being served (set by the gate middleware)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnout.admission.ticket import Ticket

_TICKET: contextvars.ContextVar[Ticket | None] = contextvars.ContextVar(
    "turnout_admission_ticket", default=None
)


def current_ticket() -> Ticket | None:
    """The current generation request's ticket (None: admission by class is off)."""
    return _TICKET.get()


@contextlib.contextmanager
def ticket_scope(ticket: Ticket | None) -> Iterator[None]:
    """Make ``ticket`` the current request's ticket for the code inside."""
    token = _TICKET.set(ticket)
    try:
        yield
    finally:
        _TICKET.reset(token)
