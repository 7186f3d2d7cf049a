"""Errors turnout raises at start-up and while serving, and the one table of error answers."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from types import MappingProxyType
from typing import Final

import msgspec


class TurnoutError(Exception):
    """Base class of turnout's own errors."""


class StartupError(TurnoutError):
    """A problem the user must fix before turnout can start (config, plugins, model files)."""


class PluginError(StartupError):
    """A plugin could not be loaded, conflicts with another, or was not found."""


class ConfigError(StartupError):
    """The configuration is invalid; the message names the key path and the bad value."""


class ParserError(TurnoutError):
    """A tool-call or reasoning parser raised while reading output: a defect of that parser
    (any text is valid input to a parser), attributed to its registered name.

    ``kind`` is ``"tool"``, ``"reasoning"`` or ``"chat format"`` (a chat format's output
    reader); the parser's own exception is ``__cause__``.
    """

    def __init__(self, kind: str, name: str, cause: BaseException) -> None:
        super().__init__(f"{kind} parser {name!r} failed: {type(cause).__name__}")
        self.kind = kind
        self.name = name
        self.__cause__ = cause


@dataclass(frozen=True, slots=True)
class ErrorStatus:
    """How an error answer with one HTTP status reads: OpenAI's error ``type``, and the ``code``
    given when the raiser names none."""

    type: str
    code: str


#: The one table of error answers: every HTTP status turnout answers an error with. The
#: ``type`` of an answer always comes from here; its ``code`` unless the raiser names one.
ERROR_STATUSES: Final[Mapping[int, ErrorStatus]] = MappingProxyType(
    {
        400: ErrorStatus("invalid_request_error", "bad_request"),
        401: ErrorStatus("authentication_error", "unauthorized"),
        403: ErrorStatus("permission_error", "forbidden"),
        404: ErrorStatus("not_found_error", "not_found"),
        405: ErrorStatus("invalid_request_error", "method_not_allowed"),
        408: ErrorStatus("timeout_error", "request_timeout"),
        409: ErrorStatus("invalid_request_error", "conflict"),
        413: ErrorStatus("invalid_request_error", "request_too_large"),
        415: ErrorStatus("invalid_request_error", "unsupported_media_type"),
        422: ErrorStatus("invalid_request_error", "unprocessable_entity"),
        429: ErrorStatus("rate_limit_error", "too_many_requests"),
        500: ErrorStatus("internal_server_error", "internal_server_error"),
        501: ErrorStatus("not_implemented_error", "not_implemented"),
        502: ErrorStatus("api_error", "bad_gateway"),
        503: ErrorStatus("service_unavailable_error", "service_unavailable"),
        504: ErrorStatus("timeout_error", "gateway_timeout"),
    }
)


def error_status(status: int) -> ErrorStatus:
    """The row of ``status``; a status without one reads as a generic client or server error
    with its reason phrase in snake case as the code (always a string, as OpenAI's are)."""
    row = ERROR_STATUSES.get(status)
    if row is not None:
        return row
    try:
        code = re.sub(r"[^a-z0-9]+", "_", HTTPStatus(status).phrase.lower()).strip("_")
    except ValueError:
        code = f"http_{status}"
    return ErrorStatus("invalid_request_error" if status < 500 else "api_error", code)


def default_code(status: int) -> str:
    """The error ``code`` of a status when the raiser names none."""
    return error_status(status).code


class ApiError(TurnoutError):
    """An error answered to the client as OpenAI's ``{"error": {...}}`` with an HTTP status.

    Raise it (or a subclass) anywhere while serving: the app's exception handlers answer it, and
    a stream that already started ends with it as an error event. ``type`` follows from the
    status (:data:`ERROR_STATUSES`); ``code`` too, unless given.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code or default_code(status)
        #: Extra response headers (``Retry-After`` and the rate-limit headers of a 429).
        self.headers = dict(headers) if headers else {}

    def __str__(self) -> str:
        return self.message

    @property
    def error_type(self) -> str:
        """OpenAI's error ``type`` of this answer."""
        return error_status(self.status).type

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


def bad_request(message: str, param: str | None = None) -> ApiError:
    """A 400 for an invalid parameter."""
    return ApiError(400, message, param=param, code="invalid_value" if param else None)
