"""The hot path's metric handles (``Tally``, ``Buckets``) record exactly what prometheus_client's
own ``inc``/``observe`` would: they write to the same values, so a change in prometheus_client's
internals shows here."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from turnout.observability.metrics import (
    ITL_BUCKETS,
    LATENCY_BUCKETS,
    TTFT_BUCKETS,
    Buckets,
    Level,
    Tally,
)


def _exposition(registry: CollectorRegistry) -> list[str]:
    text = generate_latest(registry).decode()
    return [line for line in text.splitlines() if "_created" not in line]


amounts = st.lists(
    st.one_of(
        st.floats(min_value=0, max_value=1e4, allow_nan=False),
        st.sampled_from([*TTFT_BUCKETS, *ITL_BUCKETS, *LATENCY_BUCKETS]),  # on a bound
    ),
    max_size=40,
)


@given(amounts, st.sampled_from([TTFT_BUCKETS, ITL_BUCKETS, LATENCY_BUCKETS]))
def test_buckets_observe_as_the_histogram_does(
    values: list[float], bounds: tuple[float, ...]
) -> None:
    public, fast = CollectorRegistry(), CollectorRegistry()
    by_api = Histogram("h", "help", ["model"], buckets=bounds, registry=public).labels("m")
    handle = Buckets(Histogram("h", "help", ["model"], buckets=bounds, registry=fast).labels("m"))
    for value in values:
        by_api.observe(value)
        handle.observe(value)
    assert _exposition(fast) == _exposition(public)


@given(st.lists(st.integers(min_value=0, max_value=10**6), max_size=20))
def test_tally_adds_as_the_counter_does(values: list[int]) -> None:
    public, fast = CollectorRegistry(), CollectorRegistry()
    by_api = Counter("c", "help", ["model"], registry=public).labels("m")
    handle = Tally(Counter("c", "help", ["model"], registry=fast).labels("m"))
    for value in values:
        by_api.inc(value)
        handle.inc(value)
    assert _exposition(fast) == _exposition(public)


@given(st.lists(st.booleans(), max_size=30))
def test_level_moves_as_the_gauge_does(ups: list[bool]) -> None:
    public, fast = CollectorRegistry(), CollectorRegistry()
    by_api = Gauge("g", "help", ["route"], registry=public).labels("r")
    handle = Level(Gauge("g", "help", ["route"], registry=fast).labels("r"))
    for up in ups:
        if up:
            by_api.inc()
            handle.inc()
        else:
            by_api.dec()
            handle.dec()
    assert _exposition(fast) == _exposition(public)
