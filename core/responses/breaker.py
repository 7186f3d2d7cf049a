"""A circuit breaker for a shared store: after a few failures in a row it stops calling the
store and fails at once, then lets one call through now and then to see whether the store is
back. While a store hangs, every call would otherwise wait its whole deadline, and log.

Closed (calls go through) → ``failures_to_open`` failures in a row → open (calls fail at once)
→ ``retry_s`` later → half-open (one call goes through: success closes, failure opens again).
Warnings are few: one per ``WARN_EVERY_S`` while failures still pass through, one on opening,
one per failed retry and one when the store is back.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

__all__ = ["Breaker"]

log = logging.getLogger("turnout.responses.store")

#: At most one warning about single failures per this many seconds (the breaker still closed).
WARN_EVERY_S = 10.0


class Breaker:
    """Whether to call a store now; told how each call went (see the module doc)."""

    __slots__ = (
        "_clock",
        "_failures",
        "_failures_to_open",
        "_last_warning",
        "_name",
        "_opened_at",
        "_probing",
        "_retry_s",
        "_shed",
        "_unwarned",
    )

    def __init__(
        self,
        name: str,
        *,
        failures_to_open: int = 3,
        retry_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._name = name
        self._failures_to_open = failures_to_open
        self._retry_s = retry_s
        self._clock = clock
        self._failures = 0
        #: When the breaker opened (None: closed).
        self._opened_at: float | None = None
        #: A retry is under way (half-open).
        self._probing = False
        #: Calls failed at once since the breaker opened.
        self._shed = 0
        self._last_warning = -math.inf
        self._unwarned = 0

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half-open``."""
        if self._opened_at is None:
            return "closed"
        return "half-open" if self._probing else "open"

    def admit(self) -> bool:
        """True when a call may go to the store now; False: fail it at once."""
        opened_at = self._opened_at
        if opened_at is None:
            return True
        if self._probing or self._clock() - opened_at < self._retry_s:
            self._shed += 1
            return False
        self._probing = True
        return True

    def succeeded(self) -> None:
        """An admitted call succeeded."""
        if self._opened_at is not None:
            log.warning(
                "%s reachable again (%d calls failed at once while it was not)",
                self._name,
                self._shed,
            )
        self._close()

    def failed(self, reason: str) -> None:
        """An admitted call failed (``reason`` says how)."""
        self._failures += 1
        if self._probing:
            self._probing = False
            self._opened_at = self._clock()
            log.warning(
                "%s still unreachable (%s): %d calls failed at once; next try in %gs",
                self._name,
                reason,
                self._shed,
                self._retry_s,
            )
            self._shed = 0
        elif self._opened_at is not None:
            pass  # admitted before the breaker opened: already told
        elif self._failures >= self._failures_to_open:
            self._opened_at = self._clock()
            log.warning(
                "%s unreachable (%s), %d failures in a row: failing calls at once, trying "
                "again every %gs",
                self._name,
                reason,
                self._failures,
                self._retry_s,
            )
        else:
            self._warn(reason)

    def abandoned(self) -> None:
        """An admitted call ended before it told (cancelled): a retry may go again."""
        self._probing = False

    def _close(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._probing = False
        self._shed = 0

    def _warn(self, reason: str) -> None:
        now = self._clock()
        if now - self._last_warning < WARN_EVERY_S:
            self._unwarned += 1
            return
        more = f" ({self._unwarned} more since the last warning)" if self._unwarned else ""
        log.warning("%s: %s%s", self._name, reason, more)
        self._last_warning = now
        self._unwarned = 0
