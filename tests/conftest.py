"""Fixtures shared by the whole test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DIR = REPO_ROOT.parent / "shared"


@pytest.fixture
def shared_dir() -> Path:
    """The workplace's ``shared/`` folder; tests needing it skip where it is absent."""
    if not SHARED_DIR.is_dir():
        pytest.skip(
            f"{SHARED_DIR} is absent (a plain clone of the project has no shared/ fixtures)"
        )
    return SHARED_DIR
