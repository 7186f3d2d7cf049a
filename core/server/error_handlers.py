"""The HTTP side of errors: Litestar exception handlers that answer every error in OpenAI's
shape, with the status's ``type`` from the one table (:data:`turnout.errors.ERROR_STATUSES`).

Handlers raise :class:`~turnout.errors.ApiError` (or a subclass: the worker layer's errors are
ones) and never build error responses themselves; the app and the ``/workers`` router install
:data:`EXCEPTION_HANDLERS`.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.types import ExceptionHandlersMap

from turnout.anthropic.errors import error_json, is_messages_path
from turnout.errors import ApiError, ParserError
from turnout.observability.metrics import note_failure
from turnout.server.errors import body_too_large
from turnout.server.protocol import nested_too_deeply
from turnout.server.respond import answer_error

log = logging.getLogger(__name__)


def _answer(request: Request[Any, Any, Any], error: ApiError) -> Response[bytes]:
    """The error answer; on the Messages API's routes in Anthropic's shape."""
    if not is_messages_path(request.url.path):
        return answer_error(error)
    return Response(
        error_json(error),
        status_code=error.status,
        media_type="application/json",
        headers=error.headers or None,
    )


def _api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return _answer(request, exc)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    """Litestar's own errors (404, 405, validation of parameters…) in the API's error shape."""
    if exc.status_code == 413:  # Litestar counting a chunked body (the gate checks the header)
        return _answer(
            request, body_too_large(request.route_handler.resolve_request_max_body_size())
        )
    message, param = str(exc.detail), None
    problems = exc.extra if isinstance(exc.extra, list) else []
    first = problems[0] if problems and isinstance(problems[0], dict) else {}
    if first.get("key"):
        param = str(first["key"])
        message = f"{param}: {first.get('message') or message}"
    elif first.get("message"):
        message = f"{message}: {first['message']}"
    invalid = exc.status_code == 400 and (param is not None or isinstance(exc, ValidationException))
    response = _answer(
        request,
        ApiError(exc.status_code, message, param=param, code="invalid_value" if invalid else None),
    )
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def _nested_too_deeply(request: Request[Any, Any, Any], exc: RecursionError) -> Response[bytes]:
    """JSON nested deeper than Python recursion follows (the decoders raise RecursionError)."""
    return _answer(request, nested_too_deeply())


def _parser_error(request: Request[Any, Any, Any], exc: ParserError) -> Response[bytes]:
    """A parser raised (``/parse/*``): a defect of that parser, named in the 500 answer."""
    log.error("%s on %s", exc, request.url.path, exc_info=exc.__cause__)
    note_failure(exc)
    return answer_error(ApiError(500, str(exc), code="parser_error"))


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    note_failure(exc)
    return _answer(request, ApiError(500, f"internal error: {type(exc).__name__}"))


#: Every error the app (or a router mounted alone) may meet, answered in OpenAI's shape.
EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    ApiError: _api_error,
    HTTPException: _http_error,
    RecursionError: _nested_too_deeply,
    ParserError: _parser_error,
    Exception: _internal_error,
}
