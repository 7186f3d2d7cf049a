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
