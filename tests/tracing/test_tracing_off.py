"""Tracing off (the default): nothing of OpenTelemetry's SDK is loaded, nothing is exported,
nothing is sent to the workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.server.harness import MODEL

ROOT = Path(__file__).resolve().parents[2]

_SERVE_ONE_REQUEST = f"""
import json, sys
import httpx
from tests.server.harness import run_router
with run_router() as router:
    response = httpx.post(
        router.base_url + "/v1/chat/completions",
        json={{"model": {MODEL!r}, "messages": [{{"role": "user", "content": "hi"}}]}},
        headers={{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    sent = [context for sim in router.sims for context in sim.records.metadata.values()]
prefixes = ("opentelemetry.sdk", "opentelemetry.exporter", "turnout.observability.otel")
print(json.dumps({{"loaded": sorted(m for m in sys.modules if m.startswith(prefixes)),
                   "sent": sent}}))
"""


def test_tracing_off_loads_no_sdk_and_sends_no_context() -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _SERVE_ONE_REQUEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"loaded": [], "sent": []}
