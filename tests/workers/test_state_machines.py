"""Circuit breaker, back-off and health state machines, on a fake clock."""

from __future__ import annotations

import random

import msgspec
import pytest

from turnout.workers.breaker import CircuitBreaker, CircuitState
from turnout.workers.health import HealthState, HealthTracker
from turnout.workers.retry import backoff_delay
from turnout.workers.settings import (
    BreakerSettings,
    HealthOverride,
    HealthSettings,
    RetrySettings,
    WorkersSettings,
    apply_override,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_defaults_match_sglang_router() -> None:
    s = WorkersSettings()
    assert (s.health.interval_s, s.health.timeout_s) == (60.0, 5.0)
    assert (s.health.failure_threshold, s.health.success_threshold) == (3, 2)
    cb = s.circuit_breaker
    assert (cb.failure_threshold, cb.success_threshold, cb.timeout_s) == (10, 3, 60.0)
    r = s.retry
    assert (r.max_attempts, r.initial_backoff_ms, r.max_backoff_ms) == (5, 50.0, 30_000.0)
    assert (r.backoff_multiplier, r.jitter_factor) == (1.5, 0.2)
    assert s.load_monitor.interval_s == 10.0


def test_settings_validation_and_override() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.circuit_breaker\.failure_threshold"):
        msgspec.convert({"circuit_breaker": {"failure_threshold": 0}}, WorkersSettings)
    with pytest.raises(msgspec.ValidationError, match="bogus"):
        msgspec.convert({"health": {"bogus": 1}}, WorkersSettings)
    merged = apply_override(HealthSettings(), HealthOverride(interval_s=2, failure_threshold=1))
    assert (merged.interval_s, merged.failure_threshold, merged.timeout_s) == (2, 1, 5.0)


def test_breaker_full_cycle() -> None:
    clock = Clock()
    cb = CircuitBreaker(
        BreakerSettings(failure_threshold=3, success_threshold=2, timeout_s=10), clock
    )
    for _ in range(2):
        cb.record_failure()
    cb.record_success()  # resets the consecutive count
    for _ in range(2):
        cb.record_failure()
    assert cb.state is CircuitState.CLOSED
    cb.record_failure()
    assert cb.state is CircuitState.OPEN
    assert not cb.allows()
    clock.now += 9.9
    assert not cb.allows()
    clock.now += 0.2
    assert cb.state is CircuitState.HALF_OPEN
    assert cb.allows()
    cb.record_failure()  # any failure in half-open re-opens
    assert cb.state is CircuitState.OPEN
    clock.now += 10
    cb.record_success()
    assert cb.state is CircuitState.HALF_OPEN
    cb.record_success()
    assert cb.state is CircuitState.CLOSED


def test_breaker_disabled_always_allows() -> None:
    cb = CircuitBreaker(BreakerSettings(enabled=False, failure_threshold=1))
    cb.record_failure()
    assert cb.allows()


def test_backoff_exponential_capped_with_jitter() -> None:
    s = RetrySettings(jitter_factor=0)
    assert [round(backoff_delay(s, i), 6) for i in range(3)] == [0.05, 0.075, 0.1125]
    capped = RetrySettings(jitter_factor=0, max_backoff_ms=100)
    assert backoff_delay(capped, 10) == pytest.approx(0.1)
    rng = random.Random(3)
    delays = [backoff_delay(RetrySettings(), 0, rng) for _ in range(500)]
    assert min(delays) >= 0.04 - 1e-9
    assert max(delays) <= 0.06 + 1e-9
    assert max(delays) - min(delays) > 0.015
    with pytest.raises(ValueError, match="retry_index"):
        backoff_delay(s, -1)


def test_health_pending_ready_unhealthy_recovery() -> None:
    h = HealthTracker(HealthSettings(failure_threshold=3, success_threshold=2))
    assert h.state is HealthState.PENDING
    assert h.next_delay() == 5.0
    assert not h.record_probe(False)
    assert h.state is HealthState.PENDING
    assert h.record_probe(True)
    assert h.state is HealthState.HEALTHY
    assert h.next_delay() == 60.0
    h.record_probe(False)
    assert h.next_delay() == 5.0  # suspect: probed sooner
    h.record_probe(False)
    assert h.state is HealthState.HEALTHY
    assert h.record_probe(False)
    assert h.state is HealthState.UNHEALTHY
    h.record_probe(True)
    h.record_probe(False)
    h.record_probe(True)
    assert h.state is HealthState.UNHEALTHY
    assert h.record_probe(True)
    assert h.state is HealthState.HEALTHY


def test_health_busy_worker_with_traffic_is_not_pulled() -> None:
    h = HealthTracker(HealthSettings(failure_threshold=1))
    h.record_probe(True)
    h.traffic_ok()  # before the probe: says nothing about it
    h.probe_started()
    h.traffic_ok()  # a response arrived while the (slow) probe ran
    assert not h.record_probe(False, started=True)
    assert h.state is HealthState.HEALTHY
    # Without traffic during the probe, the failure counts.
    h.probe_started()
    assert h.record_probe(False, started=True)
    assert h.state is HealthState.UNHEALTHY


def test_health_traffic_before_the_probe_does_not_excuse_it() -> None:
    h = HealthTracker(HealthSettings(failure_threshold=1))
    h.record_probe(True)
    h.traffic_ok()
    h.probe_started()
    assert h.record_probe(False, started=True)
    assert h.state is HealthState.UNHEALTHY


def test_health_false_counts_even_with_traffic() -> None:
    h = HealthTracker(HealthSettings(failure_threshold=2))
    h.record_probe(True)
    for _ in range(2):
        h.probe_started()
        h.traffic_ok()  # it still answers requests ...
        h.record_probe(False, started=True, answered=True)  # ... but says it is unhealthy
    assert h.state is HealthState.UNHEALTHY


def test_health_liveness_off_and_fault_makes_suspect() -> None:
    h = HealthTracker(HealthSettings(traffic_counts_as_liveness=False, failure_threshold=1))
    h.record_probe(True)
    h.probe_started()
    h.traffic_ok()
    assert h.record_probe(False, started=True)  # traffic does not excuse it
    h2 = HealthTracker(HealthSettings())
    h2.record_probe(True)
    assert h2.next_delay() == 60.0
    h2.traffic_ok()
    h2.traffic_fault()
    assert h2.next_delay() == 5.0
