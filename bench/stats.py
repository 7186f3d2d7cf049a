"""Summaries of latency samples (nearest-rank percentiles) for the load generator."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["percentile", "summarize_ms"]


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0..100) of already sorted values; None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not sorted_values:
        return None
    rank = max(math.ceil(q / 100 * len(sorted_values)), 1)
    return sorted_values[rank - 1]


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99/mean/max of durations given in seconds, reported in milliseconds."""
    values = sorted(seconds)
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "max": None}

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 3)

    return {
        "p50": ms(percentile(values, 50)),
        "p90": ms(percentile(values, 90)),
        "p99": ms(percentile(values, 99)),
        "mean": ms(sum(values) / len(values)),
        "max": ms(values[-1]),
    }
