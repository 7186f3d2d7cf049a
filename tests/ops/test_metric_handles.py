"""The hot path's metric handles (``Tally``, ``Buckets``) record exactly what prometheus_client's
own ``inc``/``observe`` would: they write to the same values, so a change in prometheus_client's
internals shows here."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from turnout.observability.metrics import (
    ITL_BUCKETS,
    ITL_FLUSH_S,
    LATENCY_BUCKETS,
    TTFT_BUCKETS,
    Buckets,
    Level,
    Metrics,
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


def _itl_samples(metrics: Metrics) -> dict[tuple[str, str], float]:
    return {
        (sample.name, sample.labels.get("le", "")): sample.value
        for family in metrics.registry.collect()
        if family.name == "turnout_inter_token_latency_seconds"
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


@given(st.lists(st.tuples(st.integers(0, 8), st.floats(0, 2.5)), max_size=40))
def test_a_meter_tallies_inter_token_latency_as_the_histogram_observes_it(
    steps: list[tuple[int, float]],
) -> None:
    metrics, expected = Metrics(), Metrics()
    meter = metrics.meter("m", None)
    by_api = expected.itl.labels("m")
    at = 100.0
    meter.arrived(1, at)
    for streamed, gap in steps:
        last, at = at, at + gap
        meter.arrived(streamed, at)
        if streamed:
            by_api.observe((at - last) / streamed)
    meter.finish(0, 0)
    got, want = _itl_samples(metrics), _itl_samples(expected)
    key = ("turnout_inter_token_latency_seconds_sum", "")
    assert got.pop(key) == pytest.approx(want.pop(key))  # added in another order
    assert got == want


def test_inter_token_latencies_reach_the_histogram_within_the_flush_interval() -> None:
    metrics = Metrics()
    meter = metrics.meter("m", None)

    def count() -> float | None:
        name = "turnout_inter_token_latency_seconds_count"
        return metrics.registry.get_sample_value(name, {"model": "m"})

    meter.arrived(1, 10.0)
    meter.arrived(4, 10.1)
    meter.arrived(4, 10.2)
    meter.arrived(4, 10.0 + ITL_FLUSH_S)
    assert count() == 3
    meter.arrived(4, 10.1 + ITL_FLUSH_S)
    meter.finish(1, 13)
    assert count() == 4
