"""The ``dp_ranks`` benchmark scenario: DP workers, turnout per rank vs ranks summed, and the
per-rank figures read from the simulated workers. No timing assertions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.analysis import rank_balance, rank_use
from bench.report import render_results
from bench.run import _check_args, build_parser
from bench.scenarios import by_env, max_tokens_for, router_specs, sim_args
from bench.services import start_turnout
from bench.workload import make_body


def _args(*flags: str) -> Any:
    return build_parser().parse_args(list(flags))


def test_dp_scenario_workers_routers_and_lengths(tmp_path: Path) -> None:
    args = _args("--scenarios", "dp_ranks", "--dp-size", "2", "--dp-max-running", "3")
    assert _check_args(args) is None
    assert by_env(["chat", "dp_ranks"]) == [("plain", ["chat"]), ("dp", ["dp_ranks"])]
    flags = sim_args("dp", args, 0, tmp_path)
    assert flags[flags.index("--dp-size") + 1] == "2"
    assert flags[flags.index("--max-running") + 1] == "3"
    assert flags[flags.index("--delay-ms") + 1] == "2"
    specs = router_specs("dp", args, ["turnout", "smg"])
    assert [(s.target, s.policy, s.worker_dp_size) for s in specs] == [
        ("turnout", "least_load", None),
        ("turnout-summed", "least_load", 1),
    ]
    lengths = [max_tokens_for("dp_ranks", i, 32) for i in range(16)]
    assert lengths == [256, *[32] * 7, 256, *[32] * 7]
    assert {max_tokens_for("chat", i, 32) for i in range(16)} == {32}
    body = json.loads(make_body("dp_ranks", "m", "hi", max_tokens_for("dp_ranks", 8, 32)))
    assert body["max_tokens"] == 256
    assert "--dp-size" in (_check_args(_args("--dp-size", "0")) or "")


def test_rank_use_and_balance() -> None:
    def counters(*ranks: tuple[int, int, float]) -> dict[str, Any]:
        stats = [{"requests": r, "generated_tokens": t, "queue_wait_s": w} for r, t, w in ranks]
        return {"ranks": stats}

    before = [counters((1, 10, 0.0), (1, 10, 0.5))]
    after = [counters((11, 310, 2.5), (11, 110, 0.5))]
    used = rank_use(before, after)
    assert used == [
        {"worker": 0, "rank": 0, "requests": 10, "generated_tokens": 300, "queue_wait_s": 2.5},
        {"worker": 0, "rank": 1, "requests": 10, "generated_tokens": 100, "queue_wait_s": 0.0},
    ]
    figures = rank_balance(used)
    assert figures["tokens_max_over_mean"] == 1.5
    assert figures["tokens_cv"] == 0.5
    assert figures["requests_max_over_mean"] == 1.0
    assert figures["queue_wait_s_total"] == 2.5
    assert figures["queue_wait_s_worst_rank"] == 2.5
    even = rank_balance([{"requests": 2, "generated_tokens": 9, "queue_wait_s": 0.0}] * 3)
    assert (even["tokens_max_over_mean"], even["tokens_cv"]) == (1.0, 0.0)
    table = render_results(
        {"results": {"dp_ranks": {"turnout": {"ranks": used, "rank_balance": figures}}}}
    )
    assert "data-parallel ranks" in table
    assert "    300     100" in table


def test_summed_turnout_gets_dp_size_one_in_its_config(tmp_path: Path) -> None:
    spawned: list[list[str]] = []

    def fake_spawn(name: str, argv: list[str], *_: Any) -> Any:
        spawned.append(argv)
        raise RuntimeError("not started in this test")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("bench.services._spawn", fake_spawn)
        with pytest.raises(RuntimeError):
            start_turnout(["grpc://127.0.0.1:1"], tmp_path, policy="p", worker_dp_size=1)
    argv = spawned[0]
    config = json.loads(Path(argv[argv.index("--config") + 1]).read_text())
    assert config == {"workers": [{"url": "grpc://127.0.0.1:1", "dp_size": 1}]}
    assert "--worker-urls" not in argv


def test_pd_scenario_one_regular_one_prefill_one_decode(tmp_path: Path) -> None:
    from bench.run import _env_workers

    args = _args("--scenarios", "pd,pd_stream")
    assert _check_args(args) is None
    assert by_env(["chat", "pd", "pd_stream"]) == [("plain", ["chat"]), ("pd", ["pd", "pd_stream"])]
    roles = [sim_args("pd", args, i, tmp_path) for i in range(3)]
    assert "--role" not in roles[0]
    assert [flags[flags.index("--role") + 1] for flags in roles[1:]] == ["prefill", "decode"]
    specs = router_specs("pd", args, ["turnout", "smg"])
    assert [(s.target, s.pd) for s in specs] == [("turnout", False), ("turnout-pd", True)]

    class Sim:
        def __init__(self, port: int, bootstrap_port: int = 0) -> None:
            self.url = f"grpc://127.0.0.1:{port}"
            self.bootstrap_port = bootstrap_port

    urls, flags = _env_workers("pd", [Sim(1), Sim(2, 8998), Sim(3)])
    assert urls == ["grpc://127.0.0.1:1"]
    assert flags == ["--prefill", "grpc://127.0.0.1:2", "8998", "--decode", "grpc://127.0.0.1:3"]
    assert _env_workers("plain", [Sim(1), Sim(2)]) == (
        ["grpc://127.0.0.1:1", "grpc://127.0.0.1:2"],
        [],
    )
