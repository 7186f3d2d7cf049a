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


__all__ = ["ENGINES", "client", "engine", "router", "script_file"]
