"""The discovery provider on its own: collect what watch() emits with turnout.testing."""

import asyncio

import pytest
from turnout_example_plugin.discovery import StaticListProvider

from turnout.discovery import Snapshot
from turnout.testing.discovery import collect_changes, fleet_of

URLS = ["grpc://10.0.0.5:30000", "grpc://10.0.0.6:30000"]


def test_one_snapshot_of_the_listed_workers() -> None:
    changes = asyncio.run(collect_changes(StaticListProvider(urls=URLS, model="m"), count=1))
    assert isinstance(changes[0], Snapshot)
    fleet = fleet_of(changes)
    assert [w.url for w in fleet.values()] == URLS
    assert {w.model for w in fleet.values()} == {"m"}


def test_nothing_more_is_said_after_it() -> None:
    with pytest.raises(AssertionError, match="no more changes"):
        asyncio.run(collect_changes(StaticListProvider(urls=URLS), count=2, timeout_s=0.2))


@pytest.mark.parametrize("urls", [[], "grpc://h:1", ["h:1"]])
def test_bad_options_are_refused_without_io(urls: object) -> None:
    with pytest.raises(ValueError, match="urls"):
        StaticListProvider(urls=urls)  # type: ignore[arg-type]
