"""Whether and how turnout traces: the ``tracing`` config section and the standard ``OTEL_*``
variables resolved into :class:`TracingSettings`, and :func:`start_tracing`.

Off by default, and then free: nothing of the OpenTelemetry SDK is imported (this module
imports none of it) and the request path pays one ``is None`` check per place that would open a
span. When on, :class:`turnout.observability.otel.Tracing` does the work.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Final, Literal

import msgspec

from turnout.errors import ConfigError

if TYPE_CHECKING:
    from turnout.observability.otel import Tracing

__all__ = [
    "TracingConfig",
    "TracingSettings",
    "describe_tracing",
    "resolve_tracing",
    "start_tracing",
]

Protocol = Literal["grpc", "http/protobuf"]
_PROTOCOLS: Final = ("grpc", "http/protobuf")
DEFAULT_SERVICE_NAME: Final = "turnout"


class TracingConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``tracing`` section: OpenTelemetry traces exported over OTLP.

    Every field left out falls back to the standard ``OTEL_*`` variable (the section wins where
    both are given). Tracing is on when ``enabled`` is true, or when it is left out and an OTLP
    endpoint is set (here, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
    ``OTEL_EXPORTER_OTLP_ENDPOINT``); ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``
    turn it off.
    """

    enabled: bool | None = None
    #: The collector: ``http://host:4317`` (gRPC, plaintext), ``https://…`` (TLS), or the
    #: base URL of an OTLP/HTTP collector (``/v1/traces`` is appended).
    endpoint: str | None = None
    #: ``grpc`` (the default) or ``http/protobuf``.
    protocol: Protocol | None = None
    #: Share of new traces recorded (0-1); a client's ``traceparent`` decides for its own trace.
    sampling_ratio: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    #: The ``service.name`` of the spans (default ``OTEL_SERVICE_NAME``, else ``turnout``).
    service_name: Annotated[str, msgspec.Meta(min_length=1)] | None = None


@dataclass(frozen=True, slots=True)
class TracingSettings:
    """Tracing as it will run: the config section completed from the environment."""

    #: None: the exporter reads ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT`` (or its default).
    endpoint: str | None
    protocol: Protocol
    #: None: the SDK's sampler from ``OTEL_TRACES_SAMPLER`` (default: every trace).
    sampling_ratio: float | None
    service_name: str


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def resolve_tracing(
    config: TracingConfig, environ: Mapping[str, str] | None = None
) -> TracingSettings | None:
    """The settings tracing runs with, or None when it is off. ``ConfigError`` for an
    ``OTEL_EXPORTER_OTLP_*PROTOCOL`` turnout cannot export with."""
    env = os.environ if environ is None else environ
    if config.enabled is False or _truthy(env.get("OTEL_SDK_DISABLED")):
        return None
    if config.enabled is None:
        if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            return None
        from_env = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        if not (config.endpoint or from_env):
            return None
    protocol = (
        config.protocol
        or (
            env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "grpc"
        ).strip()
    )
    if protocol not in _PROTOCOLS:
        raise ConfigError(
            f"tracing: OTLP protocol {protocol!r} is not supported; "
            f"use one of {', '.join(_PROTOCOLS)}"
        )
    endpoint = config.endpoint
    if endpoint is not None and protocol == "http/protobuf":
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return TracingSettings(
        endpoint=endpoint,
        protocol=protocol,  # type: ignore[arg-type]  # checked against _PROTOCOLS above
        sampling_ratio=config.sampling_ratio,
        service_name=config.service_name or env.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME,
    )


#: Modules of the ``tracing`` extra.
_NEEDED: Final = (
    "opentelemetry.sdk",
    "opentelemetry.exporter.otlp",
    "opentelemetry.instrumentation.asgi",
)
_MISSING_EXTRA: Final = (
    "tracing is configured but OpenTelemetry is not installed: pip install 'turnout[tracing]'"
)


def _check_installed() -> None:
    from importlib.util import find_spec

    for module in (
        "opentelemetry.sdk",
        "opentelemetry.exporter.otlp",
        "opentelemetry.instrumentation.asgi",
    ):
        try:
            found = find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise ConfigError(_MISSING_EXTRA)


def describe_tracing(config: TracingConfig) -> str:
    """One line for ``turnout check``: whether and where traces go (``ConfigError`` when
    tracing is on without the ``tracing`` extra)."""
    settings = resolve_tracing(config)
    if settings is None:
        return "tracing: off"
    _check_installed()
    endpoint = settings.endpoint or "the OTEL_EXPORTER_OTLP endpoint"
    ratio = settings.sampling_ratio
    sampling = "OTEL_TRACES_SAMPLER" if ratio is None else f"ratio {ratio:g}"
    return (
        f"tracing: OTLP/{settings.protocol} to {endpoint}, service {settings.service_name!r}, "
        f"sampling {sampling}"
    )


def start_tracing(config: TracingConfig) -> Tracing | None:
    """A :class:`Tracing` for ``config`` (the SDK is imported here), or None when tracing is
    off. Its exporter starts with :meth:`Tracing.start`."""
    settings = resolve_tracing(config)
    if settings is None:
        return None
    _check_installed()
    from turnout.observability.otel import Tracing

    return Tracing(settings)
