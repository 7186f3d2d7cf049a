"""The tenant of the request being served, and its admission (set by the gate middleware)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnout.tenants.limiter import Admission
    from turnout.tenants.table import Tenant

_TENANT: contextvars.ContextVar[Tenant | None] = contextvars.ContextVar(
    "turnout_tenant", default=None
)
_ADMISSION: contextvars.ContextVar[Admission | None] = contextvars.ContextVar(
    "turnout_admission", default=None
)


def current_tenant() -> Tenant | None:
    """The tenant whose key authenticated the current request (None: untenanted)."""
    return _TENANT.get()


def current_admission() -> Admission | None:
    """The current generation request's admission, when its tenant has limits."""
    return _ADMISSION.get()


@contextlib.contextmanager
def tenant_scope(tenant: Tenant) -> Iterator[None]:
    """Make ``tenant`` the current request's tenant for the code inside."""
    token = _TENANT.set(tenant)
    try:
        yield
    finally:
        _TENANT.reset(token)


@contextlib.contextmanager
def admission_scope(admission: Admission) -> Iterator[None]:
    """Make ``admission`` the current request's admission for the code inside."""
    token = _ADMISSION.set(admission)
    try:
        yield
    finally:
        _ADMISSION.reset(token)
