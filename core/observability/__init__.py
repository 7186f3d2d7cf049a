"""Operating turnout: Prometheus metrics, structured logs and the per-request record."""

from turnout.observability.logs import (
    RequestRecord,
    configure_logging,
    current_record,
    request_scope,
)
from turnout.observability.metrics import Metrics, RequestMeter

__all__ = [
    "Metrics",
    "RequestMeter",
    "RequestRecord",
    "configure_logging",
    "current_record",
    "request_scope",
]
