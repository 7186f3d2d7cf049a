"""Interleaved rounds (``--rounds``): the measuring order, the merged figures, the paired
ratios' medians and spreads, and the verdicts judged on the medians.

No timing assertions: the arithmetic and the wiring, on hand-made measurements.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.report import render_results
from bench.rounds import fold, median_results, round_order, spread
from bench.run import _check_args, build_parser

PAIRS = [("turnout", "smg"), ("turnout", "direct")]


def _m(cpu_ms: float, rps: float = 100.0, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "requests_per_s": rps,
        "output_tokens_per_s": rps * 128,
        "latency_ms": {"p50": 10.0, "p99": 20.0},
        "ttft_ms": {"p50": 10.0, "p99": 20.0},
        "router_cpu": {"ms_per_request": cpu_ms, "us_per_token": cpu_ms / 128 * 1000},
        "errors": 0,
        "error_samples": [],
    }
    base.update(fields)
    return base


def _round(turnout_cpu: float, smg_cpu: float) -> dict[str, dict[str, Any]]:
    return {"chat": {"turnout": _m(turnout_cpu), "smg": _m(smg_cpu)}}


def test_rounds_alternate_the_order_so_no_target_always_goes_first() -> None:
    targets = ["direct", "turnout", "smg"]
    assert round_order(targets, 0) == ["direct", "turnout", "smg"]  # one round: as before
    assert round_order(targets, 1) == ["smg", "turnout", "direct"]
    assert round_order(targets, 2) == targets
    assert round_order([], 1) == []


def test_spread_is_median_min_max_and_every_round() -> None:
    assert spread([1.2, 0.8, 1.0]) == {
        "median": 1.0,
        "min": 0.8,
        "max": 1.2,
        "values": [1.2, 0.8, 1.0],
    }
    assert spread([1.0, 2.0])["median"] == 1.5
    # a round without the figure is shown, not counted
    assert spread([None, 3.0, 1.0]) == {
        "median": 2.0,
        "min": 1.0,
        "max": 3.0,
        "values": [None, 3.0, 1.0],
    }
    assert spread([None, None])["median"] is None


def test_merged_measurement_is_the_median_figure_by_figure() -> None:
    rounds = [
        {"paced": {"direct": {"pace": {"planned_ms": 30.0, "kept": True}}, "turnout": _m(1.0)}},
        {"paced": {"direct": {"pace": {"planned_ms": 30.0, "kept": False}}, "turnout": _m(3.0)}},
        {"paced": {"direct": {"pace": {"planned_ms": 30.0, "kept": True}}, "turnout": _m(2.0)}},
    ]
    rounds[1]["paced"]["turnout"].update(errors=2, error_samples=["HTTP 503: x"], memory=[1, 2])
    rounds[2]["paced"]["turnout"].update(
        errors=1, error_samples=["HTTP 503: x", "timeout"], requests=7
    )
    merged = median_results(rounds)
    turnout = merged["paced"]["turnout"]
    assert turnout["router_cpu"]["ms_per_request"] == 2.0
    assert turnout["errors"] == 3  # summed: an error in any round shows
    assert turnout["error_samples"] == ["HTTP 503: x", "timeout"]
    assert turnout["requests"] == 7  # present in one round only
    assert turnout["memory"] == [1, 2]  # lists: the first round that has them
    # the workers kept their pace only if they kept it in every round
    assert merged["paced"]["direct"]["pace"] == {"planned_ms": 30.0, "kept": False}
    assert list(merged["paced"]) == ["direct", "turnout"]


def test_one_round_keeps_todays_result_shape() -> None:
    figures = fold([_round(0.9, 1.0)], PAIRS, 32)
    assert set(figures) == {"results", "ratios", "targets"}
    assert figures["ratios"]["turnout/smg"]["chat"]["cpu_per_request"] == 0.9
    assert figures["ratios"]["turnout/direct"] == {}
    (cpu, _throughput) = figures["targets"]
    assert (cpu["value"], cpu["met"]) == (0.9, True)
    assert "rounds" not in cpu


def test_verdict_uses_the_median_of_the_paired_ratios() -> None:
    # smg's figure moves between rounds (the machine's load); each round's pair moves with it
    per_round = [_round(1.30, 1.00), _round(0.95, 1.00), _round(0.90, 1.00)]
    figures = fold(per_round, PAIRS, 32)
    cpu = figures["ratio_rounds"]["turnout/smg"]["chat"]["cpu_per_request"]
    assert cpu == {"median": 0.95, "min": 0.9, "max": 1.3, "values": [1.3, 0.95, 0.9]}
    assert figures["ratios"]["turnout/smg"]["chat"]["cpu_per_request"] == 0.95
    check = figures["targets"][0]
    assert check["target"] == "cpu per non-streaming chat request"
    assert (check["value"], check["met"]) == (0.95, True)  # one bad round does not decide
    assert (check["rounds"], check["min"], check["max"]) == ([1.3, 0.95, 0.9], 0.9, 1.3)
    assert figures["results"]["chat"]["turnout"]["router_cpu"]["ms_per_request"] == 0.95
    assert figures["rounds"] == per_round
    assert "itl_added_rounds" not in figures  # no paced scenario
    missed = fold([_round(1.3, 1.0), _round(1.1, 1.0), _round(0.7, 1.0)], PAIRS, 32)
    assert missed["targets"][0]["met"] is False


def test_paired_ratio_is_not_the_ratio_of_medians() -> None:
    # both routers slow in round 2: its pair is 1.0 like the others; medians of each side
    # taken apart would pair round 1's turnout with round 3's smg
    per_round = [_round(1.0, 1.0), _round(3.0, 3.0), _round(2.0, 2.0)]
    per_round[0]["chat"]["smg"] = _m(0.5)
    figures = fold(per_round, PAIRS, 32)
    assert figures["ratio_rounds"]["turnout/smg"]["chat"]["cpu_per_request"]["values"] == [
        2.0,
        1.0,
        1.0,
    ]
    assert figures["ratios"]["turnout/smg"]["chat"]["cpu_per_request"] == 1.0


def test_added_delay_is_judged_on_its_median_over_rounds() -> None:
    def paced(added_p99: float) -> dict[str, dict[str, Any]]:
        direct = _m(0.0, pace={"planned_ms": 30.0, "direct_itl_p50_ms": 30.0, "kept": True})
        turnout = _m(1.0, itl_added_ms={"p50": 0.1, "p99": added_p99}, worker_tokens_per_s=9.0)
        return {"paced_stream": {"direct": direct, "turnout": turnout}}

    figures = fold([paced(9.0), paced(1.0), paced(2.0)], PAIRS, 32)
    (check,) = figures["targets"]
    assert check["target"] == "inter-token delay turnout adds at p99 (paced_stream)"
    assert (check["value"], check["met"], check["rounds"]) == (2.0, True, [9.0, 1.0, 2.0])
    added = figures["itl_added_rounds"]["paced_stream"]["turnout"]
    assert added["p99"]["values"] == [9.0, 1.0, 2.0]
    assert added["p50"]["median"] == 0.1


def test_report_prints_the_spread_of_every_ratio_and_verdict() -> None:
    figures = fold([_round(1.3, 1.0), _round(0.95, 1.0), _round(0.9, 1.0)], PAIRS, 32)
    text = render_results({**figures, "versions": {}})
    assert text.startswith("figures: median of 3 interleaved rounds")
    assert "turnout/smg over 3 rounds" in text
    row = next(line for line in text.splitlines() if "cpu_per_request" in line)
    assert row.split()[2:] == ["0.950", "0.900", "1.300", "1.300", "0.950", "0.900"]
    assert "turnout/smg = 0.950 (median of 3 rounds: 1.300 0.950 0.900) (want <= 1.0) met" in text
    one = fold([_round(0.9, 1.0)], PAIRS, 32)
    assert "rounds" not in render_results({**one, "versions": {}})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--rounds", "0"), "--rounds must be > 0"),
        (("--rounds", "2", "--profile"), "--rounds interleaves"),
        (("--rounds", "2", "--soak"), "--rounds interleaves"),
    ],
)
def test_bad_rounds(flags: tuple[str, ...], message: str) -> None:
    assert message in (_check_args(build_parser().parse_args(list(flags))) or "")


def test_rounds_default_to_one() -> None:
    assert build_parser().parse_args([]).rounds == 1
