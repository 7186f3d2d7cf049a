"""The router and simulated workers as separate processes, as deployed: for end-to-end tests
whose subject is the router process itself (its memory, its event loop's responsiveness)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.server.harness import free_port
from turnout.demo_model import path as demo_path
from turnout.sim import SimProcess
from turnout.testing.processes import GroupProcess

__all__ = ["RouterProcess", "router_with_sims"]


class RouterProcess:
    """A running ``turnout serve`` child process."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"

    def rss_mb(self) -> float:
        """Resident memory of the router process, in MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS line")


@contextlib.contextmanager
def router_with_sims(
    tmp_path: Path, *, sims: int = 1, config: dict[str, Any] | None = None
) -> Iterator[RouterProcess]:
    """``sims`` simulated workers and the router in front of them, each its own process."""
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(SimProcess()) for _ in range(sims)]
        config_file = tmp_path / "turnout.yaml"
        config_file.write_text(yaml.safe_dump(config or {}))
        port = free_port()
        group = stack.enter_context(GroupProcess(
            [sys.executable, "-m", "turnout", "serve", "--config", str(config_file),
             "--worker-urls", *(w.url for w in workers), "--model-path", str(demo_path()),
             "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        ))  # fmt: skip
        router = RouterProcess(group.proc, port)
        _wait_ready(router)
        yield router


def _wait_ready(router: RouterProcess) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{router.base_url}/readiness", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert router.proc.poll() is None, "router exited"
        assert time.monotonic() < deadline, "router did not become ready"
        time.sleep(0.1)
