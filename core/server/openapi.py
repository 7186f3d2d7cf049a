"""The OpenAPI schema, served at ``GET /openapi.json``.

Litestar generates the paths, methods and parameters from the routes. The JSON routes read their
body as raw bytes (decoded by msgspec into the request types, which is faster and gives the 400s
naming the field), so Litestar cannot see those bodies: each such route names its request type
in its ``opt`` (:data:`REQUEST_BODY`), and the request bodies, with every range declared on the
types, are added here from msgspec's JSON schema of those types, plus the rules the server
checks after decoding (:func:`~turnout.server.openapi_requests.request_rules`: served model
names, token ids within the vocabulary, allowed roles and tool shapes…), so that the bodies
the document admits are the ones the server takes. The answers come from the answer's type
(:data:`RESPONSE_BODY`) where the route has one, else from
:data:`~turnout.server.openapi_answers.ANSWERS`; the routes that stream (:data:`EVENT_STREAM`)
document ``text/event-stream`` too, with the schema of each event's data (``x-data-schema``).
Every operation documents its error statuses with the error body it answers (OpenAI's shape;
Anthropic's for the Messages API) and the bearer key it takes (none for the probes).

The document names the served models, so it is rendered again when they change (one rendering
per distinct set is kept).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

import msgspec
from litestar import Litestar, Request, Router
from litestar.connection import ASGIConnection
from litestar.enums import MediaType
from litestar.exceptions import NotFoundException
from litestar.handlers import BaseRouteHandler
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import OpenAPIRenderPlugin
from litestar.routes import HTTPRoute

from turnout.anthropic.errors import is_messages_path
from turnout.server.auth import PUBLIC_PATHS
from turnout.server.errors import ErrorResponse
from turnout.server.openapi_answers import ANSWERS, COMPONENTS, STREAM_EVENTS
from turnout.server.openapi_requests import Served, request_rules
from turnout.server.openapi_schemas import Schema, ref

if TYPE_CHECKING:
    from turnout.server.context import Services

#: Key of a route handler's ``opt`` naming the msgspec type of its JSON request body.
REQUEST_BODY = "request_body"
#: Key of a route handler's ``opt`` naming the msgspec type of its JSON answer.
RESPONSE_BODY = "response_body"
#: Key of a route handler's ``opt``: True when it reads a missing body as ``{}``.
OPTIONAL_BODY = "optional_body"
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
        "description": "Server-sent events: one `data: <JSON>` line per event (its schema: "
        "`x-data-schema`), ending with `data: [DONE]`; the Responses and Messages APIs name "
        "each event with an `event:` line and end with their last event instead",
    }
}
SCHEMA_PATH = "/openapi.json"
_REF = "#/components/schemas/{name}"


#: Renderings kept (one per set of served models; a reload or new workers change it).
_KEPT_RENDERINGS = 8
#: What the server running the app serves now (None: nothing known yet).
ServedNow = Callable[[], Served | None]


class RequestBodiesSchema(OpenAPIRenderPlugin):
    """Renders Litestar's schema with the request bodies, answers and errors added."""

    def __init__(self, served: ServedNow | None = None) -> None:
        super().__init__(path=["/", SCHEMA_PATH], media_type=MediaType.JSON)
        self._served = served
        self._rendered: dict[Served, bytes] = {}
        self._lock = threading.Lock()

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        """The schema as JSON (built once per set of served models)."""
        served = (self._served() if self._served is not None else None) or Served()
        with self._lock:
            found = self._rendered.get(served)
            if found is None:
                schema = with_request_bodies(openapi_schema, request.app, served)
                found = msgspec.json.encode(schema)
                if len(self._rendered) >= _KEPT_RENDERINGS:
                    self._rendered.pop(next(iter(self._rendered)))
                self._rendered[served] = found
            return found


def served_now(services: Callable[[], Services]) -> ServedNow:
    """What the app of ``services`` serves now: the models the requester may use (ids and
    aliases), their LoRA adapters, the smallest of their vocabularies and contexts (None
    before the app's lifespan has started)."""

    def now() -> Served | None:
        try:
            running = services()
        except RuntimeError:
            return None
        table = running.models
        models = table.served()
        aliases = [
            alias
            for model_id, model in running.config.models.items()
            if model_id in models
            for alias in model.aliases
        ]
        adapters = {model_id: list(table.adapters(model_id)) for model_id in models}
        context = _smallest(running, models, "max_context_length")
        return Served(
            models=(*models, *aliases),
            adapters=tuple(sorted({name for names in adapters.values() for name in names})),
            with_adapters=tuple(f"{m}:{name}" for m, names in adapters.items() for name in names),
            vocab_size=_smallest(running, models, "vocab_size"),
            context_length=context or _smallest(running, models, "context_length"),
            model_optional=len(models) == 1 or bool(running.config.defaults.model),
        )

    return now


def _smallest(running: Services, models: list[str], label: str) -> int | None:
    """The smallest value of a numeric worker label over the workers of ``models``."""
    found = [
        int(value)
        for model_id in models
        for worker in running.registry.workers_for(model_id)
        if (value := worker.labels.get(label, "")).isdigit()
    ]
    return min(found) if found else None


def openapi_config(served: ServedNow | None = None) -> OpenAPIConfig:
    """Serve the schema at ``GET /openapi.json`` (and nothing else under that path);
    ``served`` tells what the server serves now (its models, adapters, vocabulary)."""
    router = Router(
        SCHEMA_PATH, route_handlers=[], include_in_schema=False, guards=[_only_the_schema]
    )
    return OpenAPIConfig(
        title="turnout",
        version=_version(),
        description="OpenAI-compatible and SGLang-native API of the turnout router.",
        render_plugins=[RequestBodiesSchema(served)],
        use_handler_docstrings=True,
        openapi_router=router,
    )


def _only_the_schema(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    # Litestar also routes the schema path's sub-paths (with an HTML 404): answer ours instead.
    if connection.scope["path"].rstrip("/") != SCHEMA_PATH:
        raise NotFoundException()


#: Error statuses every operation documents, and those of some operations only.
_ERRORS_OF_ALL = ("400", "404", "503")
_ERRORS_OF_WORKER_ROUTES = ("429", "502", "504")
_WORKER_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/generate",
        "/v1/responses",
        "/v1/messages",
        "/v1/embeddings",
        "/health_generate",
        "/admin/load_lora_adapter",
        "/admin/unload_lora_adapter",
        "/admin/flush_cache",
        "/admin/start_profile",
        "/admin/stop_profile",
    }
)


class _Routes:
    """What the route handlers say about their bodies, by ``(path, method)``."""

    def __init__(self, app: Litestar) -> None:
        self.bodies: dict[tuple[str, str], type[Any]] = {}
        self.answers: dict[tuple[str, str], type[Any]] = {}
        self.streams: set[tuple[str, str]] = set()
        self.optional_bodies: set[tuple[str, str]] = set()
        for route in app.routes:
            if not isinstance(route, HTTPRoute):
                continue
            for method, (handler, _) in route.route_handler_map.items():
                key = (route.path_format, method.lower())
                kind = handler.opt.get(REQUEST_BODY)
                if kind is not None:
                    self.bodies[key] = kind
                answer = handler.opt.get(RESPONSE_BODY)
                if answer is not None:
                    self.answers[key] = answer
                if handler.opt.get(EVENT_STREAM):
                    self.streams.add(key)
                if handler.opt.get(OPTIONAL_BODY):
                    self.optional_bodies.add(key)


def with_request_bodies(
    schema: dict[str, Any], app: Litestar, served: Served | None = None
) -> dict[str, Any]:
    """``schema`` plus the request bodies (with the rules of ``served``), the answers and the
    errors of every operation."""
    routes = _Routes(app)
    kinds: list[type[Any]] = [
        *dict.fromkeys([*routes.bodies.values(), *routes.answers.values()]),
        ErrorResponse,
    ]
    refs, components = msgspec.json.schema_components(kinds, ref_template=_REF)
    ref_of = dict(zip(kinds, refs, strict=True))
    schema = msgspec.json.decode(msgspec.json.encode(schema))  # a deep copy
    found = schema.setdefault("components", {}).setdefault("schemas", {})
    added = {**components, **COMPONENTS}
    clashes = {name for name in added if name in found and found[name] != added[name]}
    clashes |= set(components).intersection(COMPONENTS)
    if clashes:
        raise RuntimeError(f"OpenAPI component names used twice: {sorted(clashes)}")
    found.update(msgspec.json.decode(msgspec.json.encode(added)))  # a copy, ours stay as they are
    _add_rules(found, request_rules(served or Served()))
    schema["components"]["securitySchemes"] = _SECURITY_SCHEMES
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            if isinstance(operation, dict) and "responses" in operation:
                _describe(path, method, operation, routes=routes, ref_of=ref_of, components=found)
    return schema


def _add_rules(components: dict[str, Any], rules: dict[str, Schema]) -> None:
    """Merge each request type's rules into its schema: ``properties`` replace the fields'
    schemas, ``require`` adds required fields, other keywords are added. A rule naming a field
    the type does not have is a mistake here: an error, caught by the tests."""
    for name, rule in rules.items():
        component = components.get(name)
        if component is None:
            continue  # that route is not in this app
        properties = component["properties"]
        for field, field_schema in rule.get("properties", {}).items():
            if field not in properties:
                raise RuntimeError(f"OpenAPI rule for unknown field {name}.{field}")
            described = properties[field].get("description")
            properties[field] = {**field_schema}
            if described and "description" not in field_schema:
                properties[field]["description"] = described
        if rule.get("require"):
            component["required"] = sorted({*component.get("required", ()), *rule["require"]})
        component.update(
            (key, value) for key, value in rule.items() if key not in ("properties", "require")
        )


def _describe(
    path: str,
    method: str,
    operation: dict[str, Any],
    *,
    routes: _Routes,
    ref_of: dict[type[Any], Schema],
    components: dict[str, Any],
) -> None:
    """Fill one operation's request body, answers, errors and security."""
    key = (path, method)
    responses = operation["responses"]
    error = _error_response(path, ref_of[ErrorResponse])
    public = path in PUBLIC_PATHS
    statuses = [*_ERRORS_OF_ALL, *([] if public else ["401"])]
    kind = routes.bodies.get(key)
    if kind is not None:
        body = ref_of[kind]
        fields = components[body["$ref"].rsplit("/", 1)[1]].get("required")
        operation["requestBody"] = {
            "required": key not in routes.optional_bodies or bool(fields),
            "content": {"application/json": {"schema": body}},
        }
    if "requestBody" in operation:
        statuses.append("413")
    if path in _WORKER_PATHS:
        statuses.extend(_ERRORS_OF_WORKER_ROUTES)
    if path in ("/workers", "/admin/reload"):
        statuses.append("409")
    for status in [s for s in responses if s.isdigit() and int(s) >= 400]:
        del responses[status]  # Litestar documents its own error shape here
    for status in sorted(statuses):
        responses[status] = error
    responses["default"] = error
    operation["security"] = [] if public else [{_BEARER: []}]
    success = _success(responses)
    if success is None:
        return
    answer = routes.answers.get(key)
    content = ref_of[answer] if answer is not None else ANSWERS.get(key)
    if content is not None:
        success["content"]["application/json"] = {"schema": content}
    if key in routes.streams:
        success["content"]["text/event-stream"] = {
            "schema": _EVENTS,
            "x-data-schema": STREAM_EVENTS[path],
        }


def _error_response(path: str, openai_error: Schema) -> dict[str, Any]:
    if is_messages_path(path):
        return {
            "description": "An error in Anthropic's shape",
            "content": {"application/json": {"schema": ref("AnthropicError")}},
        }
    return {
        "description": "An OpenAI-style error (4xx: the request; 5xx: the router or a worker)",
        "content": {"application/json": {"schema": openai_error}},
    }


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
