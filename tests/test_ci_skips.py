"""Under CI a test that would skip (missing ../shared, a missing test dependency) fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci_skips import in_ci
from tests.conftest import REPO_ROOT

SAMPLE = """
import pytest

def test_runs():
    pass

def test_needs_a_fixture_dir():
    pytest.skip("fixtures not found")

@pytest.mark.skipif(True, reason="dependency missing")
def test_marked():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    raise AssertionError
"""
MODULE_SKIP = """
import pytest
pytest.importorskip("turnout_no_such_module")

def test_never():
    pass
"""


def run_sample(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIP)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.ci_skips", "-p", "no:cacheprovider",
         "-q", "-rA", "--rootdir", str(tmp_path), "-c", os.devnull,
         "--continue-on-collection-errors", str(tmp_path)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_skips_stay_skips_outside_ci(tmp_path: Path) -> None:
    result = run_sample(tmp_path, None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 3 skipped, 1 xfailed" in result.stdout, result.stdout


def test_skips_fail_under_ci(tmp_path: Path) -> None:
    result = run_sample(tmp_path, "true")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "1 failed, 1 passed, 1 xfailed, 2 errors" in out, out
    assert "skipped under CI (fixtures not found)" in out
    assert "skipped under CI (dependency missing)" in out
    assert "turnout_no_such_module" in out


def test_what_counts_as_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, expected in [
        ("", False),
        ("0", False),
        ("false", False),
        ("true", True),
        ("1", True),
    ]:
        monkeypatch.setenv("CI", value)
        assert in_ci() is expected, value
    monkeypatch.delenv("CI")
    assert not in_ci()
