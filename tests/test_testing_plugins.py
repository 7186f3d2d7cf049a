"""``turnout.testing`` for policy and discovery plugins, and the router fixture: the helpers a
plugin's tests use, tried on turnout's own built-ins."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import turnout
from turnout.discovery import Added, DiscoveredWorker, Draining, Removed, Snapshot, WorkerChange
from turnout.plugins.discovery.file import FileProvider
from turnout.testing.discovery import collect_changes, draining_of, fleet_of
from turnout.testing.policies import PlainCandidate, candidates, choices, routing_request
from turnout.testing.router import MODEL, RunningRouter

POLICIES = turnout.load_plugins().policies


def test_candidates_and_requests_are_what_a_policy_sees() -> None:
    fleet = candidates(3, loads=[4, 0])
    assert fleet == [
        PlainCandidate("w0", "grpc://10.0.0.0:30000", 4),
        PlainCandidate("w1", "grpc://10.0.0.1:30000", 0),
        PlainCandidate("w2", "grpc://10.0.0.2:30000", 0),
    ]
    assert [c.id for c in candidates(["a", "b"])] == ["a", "b"]
    request = routing_request("hi", headers={"X-Session": "s1"}, routing_key="k")
    assert request.headers == {"x-session": "s1"}
    assert (request.text, request.routing_key, request.adapter) == ("hi", "k", None)
    with pytest.raises(ValueError, match="3 loads for 2 candidates"):
        candidates(2, loads=[1, 2, 3])


def test_choices_counts_where_a_policy_sends_requests() -> None:
    fleet = candidates(4)
    counts = choices(POLICIES.create("round_robin"), [routing_request()] * 8, fleet)
    assert counts == {"w0": 2, "w1": 2, "w2": 2, "w3": 2}
    least = choices(POLICIES.create("least_load"), [routing_request()], candidates(2, loads=[3]))
    assert least == {"w1": 1}

    class Stranger:
        def select(self, request: Any, fleet: Any) -> PlainCandidate:
            return PlainCandidate("w0")  # equal to a candidate, but not one of them

    with pytest.raises(AssertionError, match="not one of the candidates"):
        choices(Stranger(), [routing_request()], fleet)


def _worker(key: str) -> DiscoveredWorker:
    return DiscoveredWorker(key, f"grpc://{key}:30000")


class Scripted:
    """Yields the given changes, then waits to be closed (as a long-running provider does)."""

    def __init__(self, changes: list[WorkerChange], *, fail: bool = False) -> None:
        self.changes = changes
        self.fail = fail
        self.closed = False

    async def watch(self) -> AsyncIterator[WorkerChange]:
        try:
            for change in self.changes:
                yield change
            if self.fail:
                raise ConnectionError("catalog unreachable")
            await asyncio.Event().wait()
        finally:
            self.closed = True


async def test_collect_changes_stops_when_told_and_closes_the_provider() -> None:
    snapshot = Snapshot((_worker("a"), _worker("b")))
    provider = Scripted([snapshot, Added(_worker("c")), Draining("a"), Removed("b")])
    changes = await collect_changes(provider, count=4)
    assert provider.closed
    assert fleet_of(changes) == {"c": _worker("c")}
    assert draining_of(changes) == {"a"}
    # A later snapshot replaces the fleet; the keys it lists as draining stay registered.
    later = [*changes, Snapshot((_worker("d"),), draining=frozenset({"c"}))]
    assert fleet_of(later) == {"d": _worker("d")}
    assert draining_of(later) == {"c"}
    first = await collect_changes(Scripted(changes), until=lambda seen: len(seen) == 2)
    assert first == changes[:2]


async def test_collect_changes_reports_a_silent_or_failing_provider() -> None:
    with pytest.raises(AssertionError, match=r"no more changes within 0.2s; got \[Snapshot"):
        await collect_changes(Scripted([Snapshot(())]), count=2, timeout_s=0.2)
    with pytest.raises(AssertionError, match="raised ConnectionError"):
        await collect_changes(Scripted([], fail=True), count=1)


async def test_collect_changes_reads_a_real_provider(tmp_path: Path) -> None:
    listing = tmp_path / "workers.yaml"
    listing.write_text("- grpc://10.0.0.5:30000\n- {url: grpc://10.0.0.6:30000, draining: true}\n")
    changes = await collect_changes(FileProvider(path=str(listing)), count=1)
    assert [w.url for w in fleet_of(changes).values()] == ["grpc://10.0.0.5:30000"]


TOOL_CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'


@pytest.fixture
def turnout_model() -> dict[str, Any]:
    return {"tool_parser": "qwen", "policy": "round_robin"}


@pytest.fixture
def turnout_sim_script() -> dict[str, Any]:
    return {"rules": [{"match": "weather", "reply": TOOL_CALL}]}


@pytest.fixture
def turnout_sims() -> int:
    return 2


def test_the_router_fixture_serves_the_configured_plugins(turnout_router: RunningRouter) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    }
    for _ in range(4):
        status, answer = turnout_router.request_json("POST", "/v1/chat/completions", body)
        assert status == 200, answer
        (call,) = answer["choices"][0]["message"]["tool_calls"]
        assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert [len(sim.requests) for sim in turnout_router.sims] == [2, 2]
    status, error = turnout_router.request_json("POST", "/v1/chat/completions", {"model": "x"})
    assert status == 400
    assert isinstance(error["error"]["code"], str)
