"""The serving process's garbage-collector settings: start-up objects frozen, young and middle
collections less often, applied once the app has started."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from litestar.testing import AsyncTestClient

from turnout.config import Config
from turnout.server import runner
from turnout.server.collector import GEN0_THRESHOLD, MIDDLE_THRESHOLD, settle_collector


@pytest.fixture
def restore_collector() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restore_collector")
def test_settle_freezes_what_exists_and_raises_the_thresholds() -> None:
    *_, gen2 = gc.get_threshold()
    settle_collector()
    assert gc.get_freeze_count() > 1000  # the modules and objects made so far
    assert gc.get_threshold() == (GEN0_THRESHOLD, MIDDLE_THRESHOLD, gen2)


@pytest.mark.usefixtures("restore_collector")
async def test_the_served_app_settles_the_collector_once_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    monkeypatch.setattr(runner, "settle_collector", lambda: calls.append(gc.get_freeze_count()))
    _, app = runner.build(Config())
    assert calls == []
    async with AsyncTestClient(app):
        assert len(calls) == 1
