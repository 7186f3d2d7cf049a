"""What callers without the admin key are not shown (unless ``server.expose_internals``): tenant
names and the models some tenant may not use on ``/metrics``, and the workers' file paths."""

from __future__ import annotations

import re
from typing import Any

from turnout.observability.metrics import HiddenLabel
from turnout.tenants import TenantTable

__all__ = ["hidden_from_public", "without_paths"]

#: An absolute file path (POSIX, home-relative, ``file:`` URL or Windows).
_PATH = re.compile(r"^(?:/|~/|file:|[A-Za-z]:[\\/])")


def hidden_from_public(tenants: TenantTable) -> HiddenLabel:
    """What a scrape without the admin key leaves out: every tenant's name, and each model that
    some tenant is told does not exist."""

    def hidden(label: str, value: str) -> bool:
        if label == "tenant":
            return True
        if label == "model" and value:
            return any(not tenant.allows(value) for tenant in tenants)
        return False

    return hidden


def without_paths(value: Any) -> Any:
    """``value`` (JSON) with each absolute file path cut to its last part (where a worker keeps
    its model files is the operator's business; the model's directory name still tells which)."""
    if isinstance(value, str):
        if _PATH.match(value):
            return re.split(r"[\\/]", value.rstrip("/\\"))[-1]
        return value
    if isinstance(value, dict):
        return {key: without_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_paths(item) for item in value]
    return value
