"""A router in front of two simulated workers speaking vLLM's or TensorRT-LLM's protocol, set
up as the SGLang end-to-end tests' router (tests/server/conftest.py) is, so that their tests
run here unchanged against each engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import client, script_file
from tests.server.harness import Router, run_router

#: The engines besides SGLang, each behind its own router.
ENGINES = ("vllm", "trtllm")


@pytest.fixture(scope="package", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The engine protocol of this run."""
    name: str = request.param
    return name


@pytest.fixture(scope="package")
def router(engine: str, script_file: Path) -> Iterator[Router]:
    """The chat tests' router (qwen tools, qwen3 reasoning, round robin), without failover (an
    echo sim cannot continue an answer) and with the failure tests' keep-alive comments."""
    with run_router(
        sim_kwargs={"script": script_file},
        model={"tool_parser": "qwen", "reasoning_parser": "qwen3"},
        config={
            "defaults": {"policy": "round_robin"},
            "server": {"keepalive_interval_s": 0.1},
            "migration": {"enabled": False},
        },
        engine=engine,
    ) as running:
        yield running


#: Between a worker's messages, so that the router sees a stop string before the rest of the
#: answer is in (and aborts the worker, as the stop tests check); 0 lets an answer arrive whole.
PACE_MS = 5.0


@pytest.fixture(autouse=True)
def paced_workers(router: Router) -> None:
    """Every test starts with paced, fault-free sims (a test may change their knobs)."""
    for sim in router.sims:
        sim.knobs.update(
            {"delay_ms": PACE_MS, "ttft_ms": 0.0, "fail_status": None, "fail_after_tokens": None,
             "hang": False, "fault_budget": None}
        )  # fmt: skip


__all__ = ["ENGINES", "client", "engine", "paced_workers", "router", "script_file"]
