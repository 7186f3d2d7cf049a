"""The response store's circuit breaker, on a clock the test moves: open after failures in a
row, fail at once while open, one retry at a time, closed again by a success; few warnings."""

from __future__ import annotations

import logging

import pytest

from turnout.responses.breaker import Breaker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_failures_in_a_row_open_it_and_a_success_between_resets_the_count() -> None:
    breaker = Breaker("store", failures_to_open=3, retry_s=2.0, clock=Clock())
    for _ in range(2):
        assert breaker.admit()
        breaker.failed("down")
    assert breaker.admit()
    breaker.succeeded()  # not in a row
    for _ in range(2):
        assert breaker.admit()
        breaker.failed("down")
    assert breaker.state == "closed"
    assert breaker.admit()
    breaker.failed("down")
    assert breaker.state == "open"
    assert not breaker.admit()


def test_while_open_calls_fail_at_once_then_one_retry_goes_through() -> None:
    clock = Clock()
    breaker = Breaker("store", failures_to_open=1, retry_s=2.0, clock=clock)
    breaker.admit()
    breaker.failed("down")
    clock.now += 1.9
    assert not breaker.admit()
    clock.now += 0.2
    assert breaker.admit()  # the retry
    assert breaker.state == "half-open"
    assert not breaker.admit()  # only one at a time
    breaker.failed("still down")
    assert breaker.state == "open"
    clock.now += 1.0
    assert not breaker.admit()  # the wait starts again from the failed retry
    clock.now += 1.1
    assert breaker.admit()
    breaker.succeeded()
    assert breaker.state == "closed"
    assert all(breaker.admit() for _ in range(5))


def test_a_cancelled_retry_lets_the_next_call_retry() -> None:
    clock = Clock()
    breaker = Breaker("store", failures_to_open=1, retry_s=2.0, clock=clock)
    breaker.admit()
    breaker.failed("down")
    clock.now += 2.5
    assert breaker.admit()
    breaker.abandoned()
    assert breaker.admit()


def test_warnings_are_few(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    breaker = Breaker("store", failures_to_open=3, retry_s=2.0, clock=clock)
    caplog.set_level(logging.WARNING)
    # A flapping store: two failures, a success, over and over (never three in a row).
    for _ in range(50):
        for _ in range(2):
            breaker.admit()
            breaker.failed("timeout")
        breaker.admit()
        breaker.succeeded()
        clock.now += 0.1
    assert len(warnings(caplog)) == 1  # one per 10 s (5 s passed)
    caplog.clear()
    # A hung store: it opens once; a thousand calls fail at once; each retry warns once.
    for _ in range(3):
        breaker.admit()
        breaker.failed("timeout")
    for _ in range(10):
        for _ in range(100):
            if breaker.admit():
                breaker.failed("timeout")
        clock.now += 1.0
    breaker.admit()
    breaker.succeeded()
    told = warnings(caplog)
    assert len(told) <= 8, told
    assert "unreachable" in told[0]
    assert "reachable again" in told[-1]
