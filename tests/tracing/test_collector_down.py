"""A collector that cannot be reached: requests are served as usual, the failure is logged
once (not per batch, not per retry)."""

from __future__ import annotations

import logging
import time

import httpx
import pytest

from tests.server.harness import MODEL, free_port, run_router

OTEL_LOGGER = "turnout.observability.otel"


def warnings_of(caplog: pytest.LogCaptureFixture, prefix: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(prefix) and r.levelno >= logging.WARNING]


def test_unreachable_collector_is_logged_once_and_requests_are_served(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # each failed batch gives up quickly
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
    caplog.set_level(logging.INFO)
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    config = {"tracing": {"endpoint": dead, "sampling_ratio": 1.0}}
    with run_router(config) as router, httpx.Client(timeout=30) as client:
        url = f"{router.base_url}/v1/chat/completions"
        for _ in range(10):
            assert client.post(url, json=body).status_code == 200
        router.wait_until(lambda: bool(warnings_of(caplog, OTEL_LOGGER)), timeout=20)
        # More spans, more failed batches (one every 50 ms): still one line.
        for _ in range(40):  # more spans than the queue holds: the surplus is dropped
            assert client.post(url, json={**body, "stream": True}).status_code == 200
        time.sleep(0.5)
    (warning,) = warnings_of(caplog, OTEL_LOGGER)
    assert dead in warning.getMessage()
    assert warnings_of(caplog, "opentelemetry") == []  # the SDK's own per-batch lines
