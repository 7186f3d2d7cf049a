"""``bench/run.py --engine vllm|trtllm``: turnout, smg and the direct baseline against sims
speaking the engine's protocol (the comparison's numbers in that protocol)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.services import find_smg
from tests.bench.test_harness import _check_measurement, _run

from .conftest import ENGINES


@pytest.mark.slow  # two routers and a sim process per engine
@pytest.mark.skipif(find_smg() is None, reason="smg is not installed (pip install smg)")
@pytest.mark.parametrize("engine", ENGINES)
def test_bench_compares_turnout_and_smg_over_the_engine(tmp_path: Path, engine: str) -> None:
    proc, out = _run(
        tmp_path,
        *("--duration", "1", "--warmup", "0.3", "--concurrency", "2", "--workers", "1"),
        *("--scenarios", "chat_stream", "--max-tokens", "16", "--prompt-tokens", "50"),
        *("--routers", "turnout,smg", "--engine", engine),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["config"]["engine"] == engine
    targets = result["results"]["chat_stream"]
    assert set(targets) == {"direct", "turnout", "smg"}
    _check_measurement(targets["direct"], max_tokens=16, router=False)
    for router in ("turnout", "smg"):
        _check_measurement(targets[router], max_tokens=16, router=True)


def test_bench_keeps_pd_scenarios_to_sglang(tmp_path: Path) -> None:
    proc, out = _run(tmp_path, "--engine", "vllm", "--scenarios", "pd", timeout=30)
    assert proc.returncode == 2
    assert "--engine vllm" in proc.stderr
    assert not out.exists()
