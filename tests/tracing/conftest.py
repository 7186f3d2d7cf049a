"""Fixtures of the tracing tests: an OTLP/gRPC collector, and a quick batch export."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .receiver import OtlpReceiver

#: Every OTEL_* variable the tests set or that would change what they see.
_OTEL_VARIABLES = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_PROPAGATORS",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_INSECURE",
)


@pytest.fixture(autouse=True)
def otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTEL_* variable of the developer's shell; batches exported every 50 ms."""
    for name in _OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")


@pytest.fixture
def collector() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running
