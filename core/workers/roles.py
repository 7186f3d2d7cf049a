"""Worker roles in a prefill-decode (PD) disaggregated deployment.

A ``regular`` worker serves whole requests. In a PD pair, a ``prefill`` worker computes the
prompt's KV cache and sends it to a ``decode`` worker, which generates the answer; they meet per
request through the prefill worker's KV *bootstrap* server (``bootstrap_host:bootstrap_port``,
SGLang's ``--disaggregation-bootstrap-port``, 8998 by default).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

__all__ = [
    "BOOTSTRAP_PORT_LABEL",
    "DEFAULT_BOOTSTRAP_PORT",
    "MODE_LABEL",
    "Role",
    "bootstrap_port_from_labels",
    "bootstrap_port_problem",
    "role_from_labels",
]


class Role(enum.StrEnum):
    """What a worker does in a disaggregated deployment (``regular`` serves whole requests)."""

    REGULAR = "regular"
    PREFILL = "prefill"
    DECODE = "decode"


#: SGLang's default ``--disaggregation-bootstrap-port``.
DEFAULT_BOOTSTRAP_PORT: Final = 8998
#: Worker label (from ``GetServerInfo`` server args) naming SGLang's disaggregation mode.
MODE_LABEL: Final = "disaggregation_mode"
#: Worker label (from ``GetServerInfo`` server args) holding the prefill bootstrap port.
BOOTSTRAP_PORT_LABEL: Final = "disaggregation_bootstrap_port"


def role_from_labels(labels: Mapping[str, str]) -> Role:
    """The role a worker reports (``disaggregation_mode``: ``null`` or absent is regular)."""
    mode = labels.get(MODE_LABEL, "")
    try:
        return Role(mode)
    except ValueError:
        return Role.REGULAR


def bootstrap_port_from_labels(labels: Mapping[str, str]) -> int | None:
    """The bootstrap port a worker reports, if it reports a usable one."""
    try:
        port = int(labels.get(BOOTSTRAP_PORT_LABEL, ""))
    except ValueError:
        return None
    return port if 0 < port < 65536 else None


def bootstrap_port_problem(role: Role | None, bootstrap_port: int | None) -> str | None:
    """Why a worker entry's bootstrap port cannot be, or None (only a prefill worker has one;
    an entry without a role may turn out to be one)."""
    if bootstrap_port is None or role in (None, Role.PREFILL):
        return None
    return f"only a prefill worker has a bootstrap port (this one is {role.value})"
