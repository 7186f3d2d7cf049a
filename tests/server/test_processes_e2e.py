"""`turnout serve --processes 2`: one port, two serving processes, metrics summed over both."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from turnout.demo_model import path as demo_path
from turnout.sim import SimProcess
from turnout.testing.processes import GroupProcess

from .harness import free_port


def requests_counted(base_url: str) -> float:
    text = httpx.get(f"{base_url}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "turnout_requests_total"
        and sample.labels.get("route") == "/v1/chat/completions"
        and sample.labels.get("status") == "200"
    )


def chat_when_ready(base_url: str, deadline: float) -> httpx.Response:
    """A chat answer; 503 while the serving process that took it has no ready worker yet
    (/readiness answered from the other process proves nothing about this one)."""
    while True:
        reply = httpx.post(
            f"{base_url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "from many processes"}]},
            timeout=10,
        )
        if reply.status_code != 503 or time.monotonic() > deadline:
            return reply
        time.sleep(0.1)


def test_two_processes_serve_one_port_and_sum_their_metrics() -> None:
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with SimProcess() as sim, GroupProcess(
        [sys.executable, "-m", "turnout", "serve", "--processes", "2",
         "--worker-urls", sim.url, "--model-path", str(demo_path()),
         "--port", str(port), "--log-level", "warning"],
    ) as group:  # fmt: skip
        router = group.proc
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base_url}/readiness", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "router did not become ready"
            assert router.poll() is None, "router exited"
            time.sleep(0.1)
        for _ in range(12):
            reply = chat_when_ready(base_url, deadline)
            assert reply.status_code == 200
            assert reply.json()["choices"][0]["message"]["content"] == "from many processes"
        assert requests_counted(base_url) == 12
        children_file = Path(f"/proc/{router.pid}/task/{router.pid}/children")
        children = children_file.read_text().split()
        assert len(children) >= 2  # the serving processes under the supervisor
