"""Fixtures shared by the whole test suite; under CI a skipped test fails (tests/ci_skips.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ci_skips import in_ci, pytest_make_collect_report, pytest_runtest_makereport

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"

__all__ = ["pytest_make_collect_report", "pytest_runtest_makereport"]

#: The fixtures turnout ships to plugin authors (turnout_router, ...), tested on turnout itself.
pytest_plugins = ["turnout.testing.pytest_plugin"]


@pytest.fixture
def shared_dir() -> Path:
    """The workplace's ``shared/`` folder; tests needing it skip where it is absent (and fail
    under CI)."""
    if not SHARED_DIR.is_dir():
        message = f"{SHARED_DIR} is absent (a plain clone of the project has no shared/ fixtures)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_DIR


@pytest.fixture
def no_gc() -> Iterator[None]:
    """What earlier tests left is collected, then no automatic collection until the test ends
    (it would free the reference cycles a test looks for)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on ``sys.path`` for the test's plugin distributions
    (:func:`tests.plugin_fixtures.make_distribution`), and no ``TURNOUT_PLUGINS`` choice."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TURNOUT_PLUGINS", raising=False)
    return tmp_path
