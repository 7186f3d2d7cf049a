"""The HTTP layer's part of the error answers: the body's documented shape and the 413.

:class:`ApiError`, :func:`~turnout.errors.bad_request` and the status table live in
:mod:`turnout.errors` (every layer raises them); the app's exception handlers
(:mod:`turnout.server.error_handlers`) answer them.
"""

from __future__ import annotations

import msgspec

from turnout.errors import ApiError

__all__ = ["ErrorDetail", "ErrorResponse", "body_too_large"]


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
