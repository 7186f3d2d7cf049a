"""Helpers of the ops tests: scrape and parse /metrics, build requests, run ``turnout serve``."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.server.harness import MODEL, free_port
from turnout.demo_model import path as demo_path
from turnout.testing.processes import GroupProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    """Every sample of an exposition, keyed by (name, labels)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def scrape(base_url: str, **headers: str) -> Samples:
    response = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse_metrics(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value (0 when absent)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum over samples of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def chat(
    text: str = "a reply of several tokens here", stream: bool = False, **extra: Any
) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "stream": stream,
        **extra,
    }


def fresh_window(window_s: float, need_s: float = 6.0) -> None:
    """Budgets in memory are counted in clock-aligned windows: start a test with ``need_s``
    left in the current one, so that no window turns over while it runs."""
    left = window_s - time.time() % window_s
    if left < need_s:
        time.sleep(left + 0.05)


class Serve:
    """``python -m turnout serve`` with a config file (``server`` settings merged in), on a
    free port, logging to ``self.log``; ``fd_limit`` lowers its file-descriptor limit.
    ``config`` replaces whole top-level sections (``workers``, ``models`` …), ``env`` adds
    environment variables."""

    def __init__(
        self,
        tmp_path: Path,
        sim_url: str,
        server: dict[str, Any] | None = None,
        *,
        fd_limit: int | None = None,
        config: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.config: dict[str, Any] = {
            "server": {"port": free_port(), "log_json": True, **(server or {})},
            "workers": [{"url": sim_url, "model": MODEL}],
            "models": {MODEL: {"tokenizer_path": str(demo_path())}},
            "health": {"interval_s": 0.5, "pending_interval_s": 0.1},
            **(config or {}),
        }
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.path = tmp_path / "turnout.yaml"
        self.write_config()
        self.port: int = self.config["server"]["port"]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = tmp_path / "turnout.log"
        self._log_file = self.log.open("w")
        # Its own process group: close() kills every serving process, not only the first.
        argv = [sys.executable, "-m", "turnout", "serve", "--config", str(self.path)]
        self.group = GroupProcess(
            argv if fd_limit is None else _with_fd_limit(fd_limit, argv),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={"PYTHONUNBUFFERED": "1", **(env or {})},
        )
        self.proc = self.group.proc

    def write_config(self) -> None:
        self.path.write_text(yaml.safe_dump(self.config))

    def wait_ready(self, limit_s: float = 90.0) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.base_url}/readiness", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"not ready in time:\n{self.log.read_text()}")

    def close(self) -> None:
        """Kill every process of the router (its group) and remove its temporary files."""
        self.group.stop(grace_s=0)
        self._log_file.close()


#: The ``serve`` fixture: start ``turnout serve`` with extra ``server`` settings.
StartServe = Callable[..., Serve]


#: Sets the descriptor limit, then becomes the command (``python -c`` ARGS: limit, argv...).
_LIMIT_THEN_EXEC = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); os.execv(sys.argv[2], sys.argv[2:])"
)


def _with_fd_limit(limit: int, argv: list[str]) -> list[str]:
    """``argv`` run under a lower file-descriptor limit. (Not a ``preexec_fn``: Python code
    between fork and exec in a threaded test process runs other libraries' at-fork hooks,
    and one of them crashed the child.)"""
    return [sys.executable, "-c", _LIMIT_THEN_EXEC, str(limit), *argv]
