"""OpenAI-style API errors: the body's documented shape and the common answers.

:class:`ApiError` and the status table live in :mod:`turnout.errors` (the worker layer raises
them too); the app's exception handlers (:mod:`turnout.server.error_handlers`) answer them.
"""

from __future__ import annotations

import msgspec

from turnout.errors import ApiError, default_code

__all__ = [
    "ApiError",
    "ErrorDetail",
    "ErrorResponse",
    "bad_request",
    "body_too_large",
    "default_code",
]


class ErrorDetail(msgspec.Struct):
    """The ``error`` object of an error answer."""

    message: str
    type: str
    param: str | None
    code: str


class ErrorResponse(msgspec.Struct):
    """Every error answer's body (OpenAI's shape); documents :meth:`ApiError.body`."""

    error: ErrorDetail


def body_too_large(limit: int | None) -> ApiError:
    """The 413 for a request body over ``limit`` bytes."""
    where = f" of {limit} bytes" if limit is not None else ""
    return ApiError(413, f"request body is larger than the limit{where}", code="request_too_large")


def bad_request(message: str, param: str | None = None) -> ApiError:
    """A 400 for an invalid parameter."""
    return ApiError(400, message, param=param, code="invalid_value" if param else None)
