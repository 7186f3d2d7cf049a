"""Per-worker circuit breaker over request outcomes."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

from turnout.workers.settings import BreakerSettings


class CircuitState(enum.StrEnum):
    """Breaker states, as shown by ``GET /workers``."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


# Enum member look-ups are slow on CPython 3.11; the per-request path uses these constants.
_CLOSED = CircuitState.CLOSED
_OPEN = CircuitState.OPEN


class CircuitBreaker:
    """closed -> open after ``failure_threshold`` consecutive worker faults; open -> half-open
    ``timeout_s`` later (checked lazily); half-open -> closed after ``success_threshold``
    consecutive successes, or back to open on any fault. A half-open worker takes one request
    at a time (see :attr:`Worker.routable <turnout.workers.worker.Worker.routable>`).

    Only worker faults may be recorded as failures; client errors are never passed here.
    """

    __slots__ = (
        "_clock",
        "_failures",
        "_opened_at",
        "_state",
        "_successes",
        "settings",
        "transitions",
    )

    def __init__(
        self, settings: BreakerSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._successes = 0
        self._opened_at = 0.0
        #: Number of state changes, for metrics and tests.
        self.transitions = 0

    @property
    def state(self) -> CircuitState:
        """Current state; an open circuit whose timeout passed reads as half-open."""
        if self._state is CircuitState.OPEN and (
            self._clock() - self._opened_at >= self.settings.timeout_s
        ):
            self._move(CircuitState.HALF_OPEN)
        return self._state

    @property
    def consecutive_failures(self) -> int:
        """Worker faults since the last success."""
        return self._failures

    def allows(self) -> bool:
        """Whether the worker may get traffic (cheap when closed: called per request)."""
        if self._state is _CLOSED or not self.settings.enabled:
            return True
        return self.state is not _OPEN

    def record_success(self) -> None:
        """A request on this worker completed without a worker fault."""
        self._failures = 0
        if self.state is CircuitState.HALF_OPEN:
            self._successes += 1
            if self._successes >= self.settings.success_threshold:
                self._move(CircuitState.CLOSED)

    def record_failure(self) -> None:
        """A request on this worker failed through the worker's fault."""
        self._failures += 1
        self._successes = 0
        state = self.state
        if state is CircuitState.HALF_OPEN or (
            state is CircuitState.CLOSED and self._failures >= self.settings.failure_threshold
        ):
            self._opened_at = self._clock()
            self._move(CircuitState.OPEN)

    def reset(self) -> None:
        """Close the circuit (e.g. the worker was re-registered)."""
        self._failures = self._successes = 0
        if self._state is not CircuitState.CLOSED:
            self._move(CircuitState.CLOSED)

    def _move(self, state: CircuitState) -> None:
        self._state = state
        self._successes = 0
        self.transitions += 1
