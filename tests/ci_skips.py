"""Under CI (the ``CI`` environment variable set) a skipped test fails instead.

Tests skip where something they need is missing: the workplace's ``../shared`` fixtures or a
test dependency. On a developer's machine that is convenient; in CI it would hide a whole
part of the suite. Loaded by ``tests/conftest.py`` (or ``-p tests.ci_skips``). Expected
failures (``xfail``) are left alone.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest


def in_ci() -> bool:
    """True when ``CI`` is set to anything but empty, ``0`` or ``false``."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def _fail(report: pytest.TestReport | pytest.CollectReport) -> None:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr
    reason = str(reason).removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI ({reason}): tests that need ../shared or a test dependency "
        "must run in CI; provide what is missing"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[Any]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and in_ci():
        _fail(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    if report.skipped and in_ci():
        _fail(report)
    return report
