"""Several processes (as under ``uvicorn --workers N``) share metrics through
``PROMETHEUS_MULTIPROC_DIR``: a scrape of any process reports the sum."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .helpers import parse_metrics, value

WRITER = """
import sys
from turnout.observability.logs import RequestRecord
from turnout.observability.metrics import Metrics, multiprocess_mode

assert multiprocess_mode()
metrics = Metrics()
record = RequestRecord("POST", "/v1/chat/completions")
record.status, record.model = 200, "m"
metrics.observe_request(record, 0.2)
metrics.in_flight.labels("/generate").inc()
if sys.argv[1] == "exit":
    metrics.process_exit()
"""

READER = """
import sys
from turnout.observability.metrics import Metrics

sys.stdout.write(Metrics().render().decode())
"""


def run(code: str, directory: Path, *args: str) -> str:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_counters_add_up_and_dead_processes_leave_live_gauges(tmp_path: Path) -> None:
    run(WRITER, tmp_path, "exit")  # a process that stopped cleanly
    run(WRITER, tmp_path, "stay")  # one that is (as far as the files say) still running
    samples = parse_metrics(run(READER, tmp_path))
    labels = {"route": "/v1/chat/completions", "model": "m"}
    assert value(samples, "turnout_requests_total", **labels, status="200") == 2
    assert value(samples, "turnout_request_duration_seconds_count", **labels) == 2
    assert value(samples, "turnout_requests_in_flight", route="/generate") == 1
