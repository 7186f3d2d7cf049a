"""The health state machine of one worker (active probes plus passive liveness)."""

from __future__ import annotations

import enum

from turnout.workers.settings import HealthSettings


class HealthState(enum.StrEnum):
    """Probe-derived health: only ``healthy`` workers are routable."""

    PENDING = "pending"
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


_HEALTHY = HealthState.HEALTHY  # enum member look-ups are slow on CPython 3.11


class HealthTracker:
    """Counts probe outcomes into a state.

    - pending -> healthy on the first good probe (a new worker proves itself once);
    - healthy -> unhealthy after ``failure_threshold`` consecutive failed probes;
    - unhealthy -> healthy after ``success_threshold`` consecutive good probes.

    Passive liveness (``traffic_counts_as_liveness``): a probe that times out or cannot connect
    while responses to real requests keep arriving is ignored (the worker is busy, not dead).
    A ``healthy=false`` answer is the worker's own verdict and always counts, traffic or not.
    A suspect worker (a failed probe, a reported fault, or unhealthy) is probed every
    ``pending_interval_s`` instead of ``interval_s`` so that a dead worker is found, and a
    restarted one taken back, quickly.
    """

    __slots__ = ("_failures", "_state", "_successes", "_suspect", "_traffic", "settings")

    def __init__(self, settings: HealthSettings) -> None:
        self.settings = settings
        self._state = HealthState.PENDING
        self._failures = 0
        self._successes = 0
        #: Whether a real request got a response since the last ``probe_started``.
        self._traffic = False
        self._suspect = False

    @property
    def state(self) -> HealthState:
        """Current health state."""
        return self._state

    @property
    def healthy(self) -> bool:
        """Whether the state is ``healthy``."""
        return self._state is _HEALTHY

    @property
    def consecutive_failures(self) -> int:
        """Failed probes in a row."""
        return self._failures

    def next_delay(self) -> float:
        """Seconds until the next probe."""
        s = self.settings
        if self._state is HealthState.HEALTHY and not self._suspect and not self._failures:
            return s.interval_s
        return min(s.interval_s, s.pending_interval_s)

    def traffic_ok(self) -> None:
        """A real request got a response from the worker (said for every batch of responses,
        hence a flag and not a clock reading)."""
        self._traffic = True
        self._suspect = False

    def probe_started(self) -> None:
        """A probe goes out now: traffic from now on, until its outcome, shows the worker
        alive (see ``record_probe``)."""
        self._traffic = False

    def traffic_fault(self) -> None:
        """A real request failed through the worker's fault: probe it soon."""
        self._suspect = True

    def record_probe(self, ok: bool, *, started: bool = False, answered: bool = False) -> bool:
        """Count one probe outcome (``started``: the probe was announced by ``probe_started``,
        so traffic since then shows the worker alive; ``answered``: a failure is the worker's
        own ``healthy=false``, not a timeout or transport error).

        Returns True when the state changed.
        """
        if ok:
            self._failures = 0
            self._suspect = False
            if self._state is HealthState.PENDING:
                return self._set(HealthState.HEALTHY)
            if self._state is HealthState.UNHEALTHY:
                self._successes += 1
                if self._successes >= self.settings.success_threshold:
                    return self._set(HealthState.HEALTHY)
            return False
        if self.settings.traffic_counts_as_liveness and not answered and started and self._traffic:
            return False  # it answered real requests meanwhile: slow, not dead
        self._successes = 0
        self._failures += 1
        if self._state is HealthState.HEALTHY and self._failures >= self.settings.failure_threshold:
            return self._set(HealthState.UNHEALTHY)
        return False

    def mark_healthy(self) -> bool:
        """Force healthy (health checks disabled). Returns True when the state changed."""
        self._failures = 0
        return self._set(HealthState.HEALTHY)

    def _set(self, state: HealthState) -> bool:
        changed = state is not self._state
        self._state = state
        self._successes = 0
        self._failures = 0
        return changed
