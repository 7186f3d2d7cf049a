"""The OpenAPI schema, served at ``GET /openapi.json``.

Litestar generates the paths, methods and parameters from the routes. The JSON routes read their
body as raw bytes (decoded by msgspec into the request types, which is faster and gives the 400s
naming the field), so Litestar cannot see those bodies: each such route names its request type
in its ``opt`` (:data:`REQUEST_BODY`), and the request bodies, with every range declared on the
types, are added here from msgspec's JSON schema of those types; likewise the answer's type
(:data:`RESPONSE_BODY`) where the route has one, and ``text/event-stream`` for the routes that
stream (:data:`EVENT_STREAM`). Every operation also documents the OpenAI-style error body and
the bearer key it takes (none for the probes).
"""

from __future__ import annotations

import threading
from importlib import metadata
from typing import Any

import msgspec
from litestar import Litestar, Request, Router
from litestar.connection import ASGIConnection
from litestar.enums import MediaType
from litestar.exceptions import NotFoundException
from litestar.handlers import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import OpenAPIRenderPlugin
from litestar.routes import HTTPRoute

from turnout.server.auth import PUBLIC_PATHS
from turnout.server.errors import ErrorResponse

#: Key of a route handler's ``opt`` naming the msgspec type of its JSON request body.
REQUEST_BODY = "request_body"
#: Key of a route handler's ``opt`` naming the msgspec type of its JSON answer.
RESPONSE_BODY = "response_body"
#: Key of a route handler's ``opt``: True when it streams server-sent events (``stream: true``).
EVENT_STREAM = "event_stream"
_BEARER = "bearer"
_SECURITY_SCHEMES = {
    _BEARER: {
        "type": "http",
        "scheme": "bearer",
        "description": "An API key as `Authorization: Bearer <key>` (when the server has keys): "
        "a serving, tenant or admin key; `/workers` and `/admin` take the admin key only",
    }
}
_EVENTS = {
    "schema": {
        "type": "string",
        "description": "Server-sent events: one `data: <JSON chunk>` line per event (the "
        "Responses API names each with an `event:` line), ending with `data: [DONE]` (the "
        "Responses API ends with its `response.completed` event instead)",
    }
}
SCHEMA_PATH = "/openapi.json"
_REF = "#/components/schemas/{name}"


class RequestBodiesSchema(OpenAPIRenderPlugin):
    """Renders Litestar's schema with the request bodies of the raw-body routes added."""

    def __init__(self) -> None:
        super().__init__(path=["/", SCHEMA_PATH], media_type=MediaType.JSON)
        self._rendered: bytes | None = None
        self._lock = threading.Lock()

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """The schema as JSON (built once per app)."""
        with self._lock:
            if self._rendered is None:
                schema = with_request_bodies(openapi_schema, request.app)
                self._rendered = msgspec.json.encode(schema)
            return self._rendered


def openapi_config() -> OpenAPIConfig:
    """Serve the schema at ``GET /openapi.json`` (and nothing else under that path)."""
    router = Router(
        SCHEMA_PATH, route_handlers=[], include_in_schema=False, guards=[_only_the_schema]
    )
    return OpenAPIConfig(
        title="turnout",
        version=_version(),
        description="OpenAI-compatible and SGLang-native API of the turnout router.",
        render_plugins=[RequestBodiesSchema()],
        use_handler_docstrings=True,
        openapi_router=router,
    )


def _only_the_schema(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    # Litestar also routes the schema path's sub-paths (with an HTML 404): answer ours instead.
    if connection.scope["path"].rstrip("/") != SCHEMA_PATH:
        raise NotFoundException()


def with_request_bodies(schema: dict[str, Any], app: Litestar) -> dict[str, Any]:
    """``schema`` plus the request bodies named by route handlers, and the error body."""
    bodies: dict[tuple[str, str], type[Any]] = {}
    answers: dict[tuple[str, str], type[Any]] = {}
    streams: set[tuple[str, str]] = set()
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for method, (handler, _) in route.route_handler_map.items():
            key = (route.path_format, method.lower())
            kind = handler.opt.get(REQUEST_BODY)
            if kind is not None:
                bodies[key] = kind
            answer = handler.opt.get(RESPONSE_BODY)
            if answer is not None:
                answers[key] = answer
            if handler.opt.get(EVENT_STREAM):
                streams.add(key)
    kinds = [*dict.fromkeys([*bodies.values(), *answers.values()]), ErrorResponse]
    refs, components = msgspec.json.schema_components(kinds, ref_template=_REF)
    ref_of = dict(zip(kinds, refs, strict=True))
    schema = msgspec.json.decode(msgspec.json.encode(schema))  # a deep copy
    found = schema.setdefault("components", {}).setdefault("schemas", {})
    clashes = {name for name in components if name in found and found[name] != components[name]}
    if clashes:
        raise RuntimeError(f"OpenAPI component names used twice: {sorted(clashes)}")
    found.update(components)
    schema["components"]["securitySchemes"] = _SECURITY_SCHEMES
    error = {
        "description": "An OpenAI-style error (4xx: the request; 5xx: the router or a worker)",
        "content": {"application/json": {"schema": ref_of[ErrorResponse]}},
    }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            for status in [s for s in responses if s.isdigit() and int(s) >= 400]:
                responses[status] = error  # Litestar documents its own error shape here
            responses.setdefault("default", error)
            kind = bodies.get((path, method))
            if kind is not None:
                operation["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": ref_of[kind]}},
                }
            operation["security"] = [] if path in PUBLIC_PATHS else [{_BEARER: []}]
            success = _success(responses)
            if success is None:
                continue
            answer = answers.get((path, method))
            if answer is not None:
                success["content"]["application/json"] = {"schema": ref_of[answer]}
            if (path, method) in streams:
                success["content"]["text/event-stream"] = _EVENTS
    return schema


def _success(responses: dict[str, Any]) -> dict[str, Any] | None:
    """The operation's documented success (its first 2xx answer), with a ``content`` map."""
    for status, response in responses.items():
        if status.startswith("2") and isinstance(response, dict):
            response.setdefault("content", {})
            return response
    return None


def _version() -> str:
    try:
        return metadata.version("turnout")
    except metadata.PackageNotFoundError:
        return "0"
