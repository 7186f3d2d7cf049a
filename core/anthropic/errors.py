"""Errors in Anthropic's shape: ``{"type": "error", "error": {"type": …, "message": …}}``."""

from __future__ import annotations

from typing import Any

import msgspec

from turnout.errors import ApiError

#: The path prefix of the Messages API routes (their errors take Anthropic's shape).
MESSAGES_PATH = "/v1/messages"

#: HTTP status → Anthropic's error ``type``.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def is_messages_path(path: str) -> bool:
    """Whether ``path`` is a Messages API route."""
    return path == MESSAGES_PATH or path.startswith(MESSAGES_PATH + "/")


def error_type(status: int) -> str:
    """Anthropic's error ``type`` of an answer with ``status``."""
    found = _TYPES.get(status)
    if found is not None:
        return found
    return "invalid_request_error" if status < 500 else "api_error"


def error_body(error: ApiError) -> dict[str, Any]:
    """The error object (also the data of the stream's ``error`` event)."""
    return {
        "type": "error",
        "error": {"type": error_type(error.status), "message": error.message},
    }


def error_json(error: ApiError) -> bytes:
    """The error body as JSON bytes."""
    return msgspec.json.encode(error_body(error))


def error_event(error: ApiError) -> bytes:
    """The ``error`` event that ends a stream cut short (SSE framing)."""
    return b"event: error\ndata: " + error_json(error) + b"\n\n"
