"""The ``tracing`` section and the ``OTEL_*`` variables: when tracing is on, and with what."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from turnout.config import build_config
from turnout.errors import ConfigError
from turnout.observability.tracing import (
    TracingConfig,
    TracingSettings,
    describe_tracing,
    resolve_tracing,
    start_tracing,
)


def resolve(section: dict[str, object], **env: str) -> TracingSettings | None:
    return resolve_tracing(build_config({"tracing": section}).tracing, env)


def test_off_by_default() -> None:
    assert resolve_tracing(TracingConfig(), {}) is None
    assert resolve({}) is None
    assert describe_tracing(TracingConfig(enabled=False)) == "tracing: off"


def test_an_endpoint_turns_it_on() -> None:
    assert resolve({"endpoint": "http://collector:4317"}) == TracingSettings(
        endpoint="http://collector:4317",
        protocol="grpc",
        sampling_ratio=None,
        service_name="turnout",
    )
    settings = resolve({}, OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4317", OTEL_SERVICE_NAME="gw")
    assert settings is not None
    assert (settings.endpoint, settings.service_name) == (None, "gw")  # the SDK reads the env
    assert resolve({}, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://c:4317") is not None


def test_the_section_wins_over_the_variables() -> None:
    settings = resolve(
        {"endpoint": "http://c:4318", "protocol": "http/protobuf", "service_name": "edge"},
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_SERVICE_NAME="ignored",
    )
    assert settings == TracingSettings(
        endpoint="http://c:4318/v1/traces",
        protocol="http/protobuf",
        sampling_ratio=None,
        service_name="edge",
    )
    env_protocol = resolve({"enabled": True}, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf")
    assert env_protocol is not None
    assert env_protocol.protocol == "http/protobuf"


def test_switches_off() -> None:
    endpoint = {"endpoint": "http://c:4317"}
    assert resolve({**endpoint, "enabled": False}) is None
    assert resolve(endpoint, OTEL_SDK_DISABLED="true") is None
    assert resolve({}, OTEL_EXPORTER_OTLP_ENDPOINT="x", OTEL_TRACES_EXPORTER="none") is None


def test_bad_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="sampling_ratio"):
        build_config({"tracing": {"sampling_ratio": 1.5}})
    with pytest.raises(ConfigError, match="unknown key 'sampler'"):
        build_config({"tracing": {"sampler": "always_on"}})
    with pytest.raises(ConfigError, match="http/json"):
        resolve({"enabled": True}, OTEL_EXPORTER_OTLP_PROTOCOL="http/json")


def test_turnout_check_names_where_traces_go(tmp_path: Path) -> None:
    config = tmp_path / "turnout.yaml"
    config.write_text(
        "tracing: {endpoint: 'http://collector:4317', sampling_ratio: 0.25, service_name: edge}\n"
    )
    env = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    result = subprocess.run(
        [sys.executable, "-m", "turnout", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "tracing: OTLP/grpc to http://collector:4317, service 'edge', sampling ratio 0.25"
        in result.stdout.splitlines()
    )


def test_tracing_without_the_extra_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def without_sdk(name: str, package: str | None = None) -> object:
        return None if name.startswith("opentelemetry.sdk") else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_sdk)
    with pytest.raises(ConfigError, match=r"pip install 'turnout\[tracing\]'"):
        start_tracing(TracingConfig(endpoint="http://collector:4317"))
    assert start_tracing(TracingConfig()) is None  # off: nothing is looked for
