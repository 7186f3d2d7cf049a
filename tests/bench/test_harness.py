"""The whole harness, end to end: simulated workers, routers, the load generator process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.services import find_smg

ROOT = Path(__file__).resolve().parents[2]


def _run(
    tmp_path: Path, *flags: str, timeout: float = 90
) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--out", str(out), *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,  # run.py must not depend on the working directory
        check=False,
    )
    return proc, out


def _check_measurement(data: dict[str, Any], *, max_tokens: int, router: bool) -> None:
    assert data["errors"] == 0, data["error_samples"]
    assert data["requests"] > 0
    assert data["tokens_per_request"] == max_tokens
    # Between one event per request and one per token (plus the finish and usage chunks).
    assert 1 <= data["events_per_request"] <= max_tokens + 2
    assert data["requests_per_s"] > 0
    assert data["latency_ms"]["p50"] <= data["latency_ms"]["p99"]
    assert data["workers_cpu_s"] > 0
    if router:
        cpu = data["router_cpu"]
        assert cpu["seconds"] > 0
        assert cpu["ms_per_request"] > 0
        assert cpu["us_per_token"] == pytest.approx(
            cpu["ms_per_request"] * 1000 / max_tokens, rel=0.01
        )
        assert data["router_rss_mb"] > 10


def test_smoke_run_writes_a_well_formed_result(tmp_path: Path) -> None:
    proc, out = _run(
        tmp_path,
        *("--duration", "1", "--warmup", "0.3", "--concurrency", "2", "--workers", "1"),
        *("--scenarios", "chat_stream", "--routers", "turnout", "--max-tokens", "16"),
        *("--prompt-tokens", "50"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["schema"] == "turnout-bench/1"
    assert result["mode"] == "compare"
    assert result["config"]["routers"] == ["turnout"]
    assert result["machine"]["cpus"] >= 1
    targets = result["results"]["chat_stream"]
    assert set(targets) == {"direct", "turnout"}
    _check_measurement(targets["direct"], max_tokens=16, router=False)
    _check_measurement(targets["turnout"], max_tokens=16, router=True)
    assert targets["turnout"]["ttft_ms"]["p50"] is not None
    assert result["ratios"]["turnout/direct"]["chat_stream"]["requests_per_s"] > 0
    assert result["ratios"]["turnout/smg"] == {}
    assert "turnout" in proc.stdout  # the printed table
    assert str(out) in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif(find_smg() is None, reason="smg is not installed (pip install smg)")
def test_smoke_run_against_smg(tmp_path: Path) -> None:
    proc, out = _run(
        tmp_path,
        *("--duration", "1", "--warmup", "0.3", "--concurrency", "2", "--workers", "1"),
        *("--scenarios", "chat,generate", "--max-tokens", "16", "--prompt-tokens", "50"),
        *("--routers", "turnout,smg", "--no-direct"),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    for scenario in ("chat", "generate"):
        for router in ("turnout", "smg"):
            _check_measurement(result["results"][scenario][router], max_tokens=16, router=True)
    ratios = result["ratios"]["turnout/smg"]["chat"]
    assert ratios["cpu_per_request"] > 0
    assert {c["target"] for c in result["targets"]} >= {"cpu per non-streaming chat request"}


@pytest.mark.slow
def test_rounds_interleave_the_targets_with_routers_kept_up(tmp_path: Path) -> None:
    proc, out = _run(
        tmp_path,
        *("--duration", "1", "--warmup", "0.3", "--concurrency", "2", "--workers", "1"),
        *("--scenarios", "chat", "--routers", "turnout", "--max-tokens", "16"),
        *("--prompt-tokens", "50", "--rounds", "2"),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = [
        line.split()[1:3] for line in proc.stdout.splitlines() if line.startswith("  chat ")
    ]
    assert measured == [["direct", "r1"], ["turnout", "r1"], ["turnout", "r2"], ["direct", "r2"]]
    assert proc.stdout.count("ready at") == 1  # turnout started once for both rounds
    result = json.loads(out.read_text())
    assert result["config"]["rounds"] == 2
    assert len(result["rounds"]) == 2
    for one in result["rounds"]:
        _check_measurement(one["chat"]["turnout"], max_tokens=16, router=True)
    spread = result["ratio_rounds"]["turnout/direct"]["chat"]["requests_per_s"]
    assert len(spread["values"]) == 2
    assert spread["min"] <= spread["median"] <= spread["max"]
    assert result["ratios"]["turnout/direct"]["chat"]["requests_per_s"] == spread["median"]
    _check_measurement(result["results"]["chat"]["turnout"], max_tokens=16, router=True)
    assert "median of 2 interleaved rounds" in proc.stdout


@pytest.mark.slow
def test_new_scenarios_end_to_end(tmp_path: Path) -> None:
    """Paced streams over two load generators, parsers, and two serving processes: every
    figure the report needs is there (values are not checked: the machine may be busy)."""
    proc, out = _run(
        tmp_path,
        *("--duration", "1.5", "--warmup", "0.3", "--concurrency", "4", "--workers", "2"),
        *("--scenarios", "paced_stream,parse_chat_stream,processes", "--routers", "turnout"),
        *("--paced-streams", "8", "--paced-max-tokens", "8", "--paced-delay-ms", "5-10"),
        *("--loadgen-processes", "2", "--prompt-tokens", "60", "--max-tokens", "8"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    paced = result["results"]["paced_stream"]
    assert paced["turnout"]["loadgen_processes"] == 2
    assert paced["turnout"]["concurrency"] == 8
    assert paced["turnout"]["errors"] == 0, paced["turnout"]["error_samples"]
    assert paced["direct"]["itl_ms"]["p50"] > 0
    assert set(paced["turnout"]["itl_added_ms"]) == {"p50", "p99"}
    memory = paced["turnout"]["memory"]
    assert memory["idle_rss_mb"] > 10
    assert memory["samples"]
    assert paced["turnout"]["worker_tokens"] > 0
    parsed = result["results"]["parse_chat_stream"]["turnout"]
    assert parsed["errors"] == 0, parsed["error_samples"]  # reasoning and tool calls came out
    processes = result["results"]["processes"]
    assert set(processes) == {"direct", "turnout", "turnout-p2"}
    for target in ("turnout", "turnout-p2"):
        assert processes[target]["errors"] == 0, processes[target]["error_samples"]
        assert 0 < processes[target]["routing"]["same_worker_share"] <= 1
        # the load generator's 4 connections, over the serving processes that took them
        assert sum(processes[target]["routing"]["connections_per_process"]) == 4
    assert len(processes["turnout"]["routing"]["connections_per_process"]) == 1
    assert "turnout-p2/turnout" in result["ratios"]
    assert "paced streams" in proc.stdout
    assert "routing quality" in proc.stdout


@pytest.mark.slow
def test_dp_ranks_end_to_end(tmp_path: Path) -> None:
    """turnout per rank and with ranks summed in front of DP workers: per-rank figures."""
    proc, out = _run(
        tmp_path,
        *("--duration", "1.5", "--warmup", "0.3", "--concurrency", "4", "--workers", "1"),
        *("--scenarios", "dp_ranks", "--routers", "turnout", "--no-direct"),
        *("--dp-size", "2", "--dp-delay-ms", "1", "--prompt-tokens", "60", "--max-tokens", "8"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["config"]["dp_size"] == 2
    targets = result["results"]["dp_ranks"]
    assert set(targets) == {"turnout", "turnout-summed"}
    for data in targets.values():
        assert data["errors"] == 0, data["error_samples"]
        assert [(r["worker"], r["rank"]) for r in data["ranks"]] == [(0, 0), (0, 1)]
        assert sum(r["requests"] for r in data["ranks"]) > 0
        assert data["rank_balance"]["tokens_max_over_mean"] >= 1.0
    assert "turnout/turnout-summed" in result["ratios"]
    assert "data-parallel ranks" in proc.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--scenarios", "embed"), "--scenarios"),
        (("--routers", "nginx"), "--routers"),
        (("--duration", "0"), "--duration"),
    ],
)
def test_bad_flags_exit_2(tmp_path: Path, flags: tuple[str, ...], message: str) -> None:
    proc, out = _run(tmp_path, *flags, timeout=30)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not out.exists()
