"""OpenAI-style API errors: one exception type, one JSON body shape, one status per cause."""

from __future__ import annotations

from http import HTTPStatus

import msgspec

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "internal_server_error",
    501: "not_implemented_error",
    503: "service_unavailable_error",
    504: "timeout_error",
}


class ErrorDetail(msgspec.Struct):
    """The ``error`` object of an error answer."""

    message: str
    type: str
    param: str | None
    code: str


class ErrorResponse(msgspec.Struct):
    """Every error answer's body (OpenAI's shape); documents :meth:`ApiError.body`."""

    error: ErrorDetail


class ApiError(Exception):
    """An error answered to the client as ``{"error": {...}}`` with an HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code or default_code(status)
        self.error_type = error_type or _TYPES.get(
            status, "invalid_request_error" if status < 500 else "api_error"
        )

    def body(self) -> dict[str, dict[str, str | None]]:
        """The OpenAI error object."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_json(self) -> bytes:
        """The error body as JSON bytes."""
        return msgspec.json.encode(self.body())


#: Codes of statuses that several places answer, whoever raises them.
_CODES = {413: "request_too_large"}


def default_code(status: int) -> str:
    """The error ``code`` of a status when nothing more specific is known: its reason phrase in
    snake case (``not_found``, ``method_not_allowed``…); always a string, as OpenAI's are."""
    if status in _CODES:
        return _CODES[status]
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return f"http_{status}"


def body_too_large(limit: int | None) -> ApiError:
    """The 413 for a request body over ``limit`` bytes."""
    where = f" of {limit} bytes" if limit is not None else ""
    return ApiError(413, f"request body is larger than the limit{where}", code="request_too_large")


def bad_request(message: str, param: str | None = None) -> ApiError:
    """A 400 for an invalid parameter."""
    return ApiError(400, message, param=param, code="invalid_value" if param else None)
