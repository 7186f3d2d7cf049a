"""Tenants: who sent a request (by API key), which models it may use, and its budgets.

* :mod:`turnout.tenants.table` — the configured tenants and their keys.
* :mod:`turnout.tenants.context` — the tenant of the request being served (a contextvar).
* :mod:`turnout.tenants.store` — the ``limits`` storage with deadlines and fail open / closed.
* :mod:`turnout.tenants.limiter` — admission (requests per minute, concurrency) and token
  reservations settled to the real usage.
* :mod:`turnout.tenants.refusal` — the 429 answers with OpenAI's rate-limit headers.
"""

from turnout.tenants.context import current_admission, current_tenant
from turnout.tenants.limiter import Admission, TenantLimiter
from turnout.tenants.table import Tenant, TenantTable

__all__ = [
    "Admission",
    "Tenant",
    "TenantLimiter",
    "TenantTable",
    "current_admission",
    "current_tenant",
]
