"""Interleaved rounds (``--rounds N``): the order targets are measured in each round, and how
the rounds' measurements, same-run ratios and target checks fold into one verdict.

On a shared machine the load changes from one minute to the next, so a ratio of two windows
taken minutes apart carries that change. With several rounds each ratio is paired (both windows
of the same round, taken back to back) and the verdict uses the median over the rounds; the
spread (min, max, every round's value) is kept beside it. Pure functions, unit-tested.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from bench.report import check_targets, ratios

__all__ = [
    "added_delay_spreads",
    "fold",
    "median_results",
    "ratio_spreads",
    "round_order",
    "spread",
    "spread_medians",
    "with_check_spreads",
]

#: ``error_samples`` kept in a merged measurement (as many as one load-generator run keeps).
MAX_ERROR_SAMPLES = 5


def round_order(targets: Sequence[str], round_index: int) -> list[str]:
    """The order ``targets`` are measured in round ``round_index`` (from 0): as given in even
    rounds, reversed in odd ones (ABC, CBA, ABC, ...), so that no target always goes first."""
    ordered = list(targets)
    return ordered[::-1] if round_index % 2 else ordered


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def spread(values: Sequence[Any]) -> dict[str, Any]:
    """Median, min and max of the numbers among ``values`` (one per round; None where a round
    had no figure), and the values themselves in round order. Median/min/max are None when no
    round had a number."""
    numbers = [float(v) for v in values if _number(v)]
    if not numbers:
        return {"median": None, "min": None, "max": None, "values": list(values)}
    return {
        "median": round(statistics.median(numbers), 4),
        "min": min(numbers),
        "max": max(numbers),
        "values": list(values),
    }


def _merge(values: Sequence[Any], key: str | None = None) -> Any:
    """One figure from the rounds' figures: numbers by their median, dicts key by key, flags
    true only when true in every round, ``errors`` summed, ``error_samples`` gathered; any other
    value (lists of samples, text) is the first round's."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if key == "errors" and all(_number(v) for v in present):
        return sum(present)
    if key == "error_samples":
        samples: list[Any] = []
        for v in present:
            samples += [s for s in v if s not in samples]
        return samples[:MAX_ERROR_SAMPLES]
    if all(isinstance(v, bool) for v in present):
        return all(present)
    if all(_number(v) for v in present):
        middle = statistics.median(present)
        return round(middle, 4) if isinstance(middle, float) else middle
    if all(isinstance(v, dict) for v in present):
        keys = list(dict.fromkeys(k for v in present for k in v))
        return {k: _merge([v.get(k) for v in present], k) for k in keys}
    return present[0]


def median_results(
    rounds: Sequence[dict[str, dict[str, Any]]],
) -> dict[str, dict[str, Any]]:
    """Per scenario and target, the measurement of the rounds merged figure by figure (see
    ``_merge``); scenarios and targets in the first round's order."""
    merged: dict[str, dict[str, Any]] = {}
    for scenario, targets in rounds[0].items():
        merged[scenario] = {
            target: _merge([r.get(scenario, {}).get(target) for r in rounds]) for target in targets
        }
    return merged


def ratio_spreads(
    rounds: Sequence[dict[str, dict[str, Any]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per scenario and ratio metric, the ``spread`` of the rounds' paired ratios (each round's
    table as ``report.ratios`` makes it for one pair of targets)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for scenario, metrics in rounds[0].items():
        out[scenario] = {
            metric: spread([r.get(scenario, {}).get(metric) for r in rounds]) for metric in metrics
        }
    return out


def spread_medians(
    spreads: dict[str, dict[str, dict[str, Any]]],
) -> dict[str, dict[str, Any]]:
    """A ``ratio_spreads`` table reduced to its medians: the shape of one round's table."""
    return {
        scenario: {metric: s["median"] for metric, s in metrics.items()}
        for scenario, metrics in spreads.items()
    }


def added_delay_spreads(
    rounds: Sequence[dict[str, dict[str, Any]]],
) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """Per paced scenario and router, the ``spread`` of the inter-token delay it added to the
    same round's direct run (``itl_added_ms`` p50 and p99)."""
    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for scenario, targets in rounds[0].items():
        for target, data in targets.items():
            if "itl_added_ms" not in data:
                continue
            added = [
                (r.get(scenario, {}).get(target) or {}).get("itl_added_ms") or {} for r in rounds
            ]
            out.setdefault(scenario, {})[target] = {
                q: spread([a.get(q) for a in added]) for q in ("p50", "p99")
            }
    return out


def with_check_spreads(
    checks: list[dict[str, Any]], per_round: Sequence[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """``checks`` (made from the medians) with each check's value in every round (``rounds``)
    and their ``min`` and ``max``. ``per_round`` holds each round's own checks, which come in
    the same order as ``checks``: they are made from the same scenarios and targets."""
    out: list[dict[str, Any]] = []
    for i, check in enumerate(checks):
        values = [r[i]["value"] if i < len(r) else None for r in per_round]
        s = spread(values)
        out.append({**check, "rounds": values, "min": s["min"], "max": s["max"]})
    return out


def fold(
    per_round: Sequence[dict[str, dict[str, Any]]],
    pairs: Sequence[tuple[str, str]],
    concurrency: int,
) -> dict[str, Any]:
    """The compare result's figures from one result table per round: ``results``, ``ratios``
    (``"A/B"`` per pair) and ``targets`` (checked on ``turnout/smg``). One round: its figures as
    they are. Several: per-target medians, the median of each paired ratio, targets judged on
    those medians, and beside them every round's results (``rounds``), the ratios' spreads
    (``ratio_rounds``), the added inter-token delays' spreads (``itl_added_rounds``, paced
    scenarios only) and each check's value per round."""
    tables = [{f"{a}/{b}": ratios(results, a, b) for a, b in pairs} for results in per_round]
    if len(per_round) == 1:
        results = per_round[0]
        table = tables[0]
        targets = check_targets(table.get("turnout/smg", {}), results, concurrency)
        return {"results": results, "ratios": table, "targets": targets}
    results = median_results(per_round)
    spreads = {name: ratio_spreads([t[name] for t in tables]) for name in tables[0]}
    medians = {name: spread_medians(s) for name, s in spreads.items()}
    checks = check_targets(medians.get("turnout/smg", {}), results, concurrency)
    each = [
        check_targets(t.get("turnout/smg", {}), r, concurrency)
        for t, r in zip(tables, per_round, strict=True)
    ]
    out: dict[str, Any] = {
        "results": results,
        "ratios": medians,
        "targets": with_check_spreads(checks, each),
        "rounds": list(per_round),
        "ratio_rounds": spreads,
    }
    added = added_delay_spreads(per_round)
    if added:
        out["itl_added_rounds"] = added
    return out
