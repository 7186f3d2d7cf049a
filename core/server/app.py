"""The Litestar application, built by a factory from the typed config."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from litestar import Litestar, Request, Response, post
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.types import ControllerRouterHandler, Guard

from turnout.config import Config, policy_config
from turnout.plugin_choice import choose_plugins, validate_plugin_names
from turnout.plugin_loader import Plugins, load_plugins
from turnout.routing.types import Policy, RoutingRequest
from turnout.server.chat import handle_chat
from turnout.server.completions import handle_completion
from turnout.server.context import RequestContext, Services, new_request_id
from turnout.server.errors import ApiError
from turnout.server.generate import handle_generate
from turnout.server.info import info_routes
from turnout.server.models import ModelTable
from turnout.server.pipeline import GenerateSession
from turnout.server.respond import Answer, answer_error
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.workers.dispatch import Dispatcher
from turnout.workers.errors import DispatchError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.routes import DEPENDENCY as WORKER_REGISTRY
from turnout.workers.routes import admin_key_guard, workers_router

log = logging.getLogger("turnout.server")

Handler = Callable[[Services, bytes, RequestContext], Awaitable[Answer]]


def services_of(request: Request[Any, Any, Any]) -> Services:
    """The app's services (set by the lifespan)."""
    services: Services = request.app.state["services"]
    return services


def request_context(
    request: Request[Any, Any, Any], services: Services, prefix: str
) -> RequestContext:
    """Request id (client-given or new), lower-cased headers and the routing key."""
    headers = {name.lower(): value for name, value in request.headers.items()}
    server = services.config.server
    request_id = next(
        (headers[name] for name in server.request_id_headers if headers.get(name)), None
    ) or new_request_id(prefix)
    return RequestContext(request_id, headers, headers.get(server.routing_key_header.lower()))


def _generation_route(path: str, prefix: str, handler: Handler) -> ControllerRouterHandler:
    @post(path, name=prefix, status_code=200)
    async def route(request: Request[Any, Any, Any]) -> Answer:
        services = services_of(request)
        if services.draining:
            raise ApiError(503, "turnout is shutting down")
        ctx = request_context(request, services, prefix)
        body = await request.body()
        try:
            answer = await handler(services, body, ctx)
        except DispatchError as exc:
            raise ApiError(exc.status, exc.message, code=exc.code) from None
        answer.headers["x-request-id"] = ctx.request_id
        return answer

    return route


def _policies(config: Config, plugins: Plugins) -> tuple[dict[str, Policy], Callable[[], Policy]]:
    policies = {
        model_id: _make_policy(plugins, choose_plugins(model_id, config, plugins).policy)
        for model_id in config.models
    }
    default = policy_config(config.defaults.policy)

    def default_policy() -> Policy:
        return _make_policy(plugins, default)

    return policies, default_policy


def _make_policy(plugins: Plugins, choice: Any) -> Policy:
    policy: Policy = plugins.policies.create(choice.name, **choice.params)
    return policy


def _configured_models(config: Config) -> list[str]:
    """Models whose tokenizer is known from the config alone (loaded at start-up)."""
    with_workers = {w.model for w in config.workers if w.model}
    return sorted(
        m
        for m in with_workers | set(config.models)
        if (config.models[m].tokenizer_path if m in config.models else None)
        or config.defaults.tokenizer_path
    )


def _tokenizer_hint(registry: WorkerRegistry) -> Callable[[str], str | None]:
    def hint(model_id: str) -> str | None:
        for worker in registry.workers_for(model_id):
            for key in ("tokenizer_path", "model_path"):
                if worker.labels.get(key):
                    return worker.labels[key]
        return None

    return hint


def _opener(dispatcher: Dispatcher, config: Config) -> Any:
    timeout = config.server.request_timeout_s or None

    async def open_stream(
        model: str, routing: RoutingRequest, request: pb.GenerateRequest
    ) -> GenerateSession:
        return await dispatcher.open_stream(model, routing, request, timeout)

    return open_stream


def create_app(
    config: Config,
    *,
    plugins: Plugins | None = None,
    on_startup: Callable[[Services], Awaitable[None]] | None = None,
    before: Sequence[Callable[[Litestar], contextlib.AbstractAsyncContextManager[None]]] = (),
) -> Litestar:
    """Build the app. Workers, channels and background tasks live in its lifespan."""
    plugins = plugins or load_plugins()
    validate_plugin_names(config, plugins)

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        registry = WorkerRegistry(config.workers_settings())
        policies, default_policy = _policies(config, plugins)
        dispatcher = Dispatcher(registry, policies, default_policy)
        models = ModelTable(
            config,
            plugins,
            registry.models,
            _tokenizer_hint(registry),
        )
        services = Services(config, plugins, models, _opener(dispatcher, config))
        services.extras["registry"] = registry
        services.extras["dispatcher"] = dispatcher
        app.state["services"] = services
        await models.preload(_configured_models(config))
        await registry.start()
        try:
            if on_startup is not None:
                await on_startup(services)
            yield
        finally:
            services.draining = True
            await registry.stop()

    routes: list[ControllerRouterHandler] = [
        _generation_route("/v1/chat/completions", "chatcmpl", handle_chat),
        _generation_route("/v1/completions", "cmpl", handle_completion),
        _generation_route("/generate", "gnt", handle_generate),
        *info_routes(),
        workers_router(guards=_admin_guards(config)),
    ]
    return Litestar(
        route_handlers=routes,
        lifespan=[*before, lifespan],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            Exception: _internal_error,
        },
        dependencies={WORKER_REGISTRY: Provide(_provide_registry, sync_to_thread=False)},
        request_max_body_size=config.server.max_body_bytes,
        openapi_config=None,
        debug=False,
    )


def _provide_registry(state: State) -> WorkerRegistry:
    registry = state["services"].extras["registry"]
    assert isinstance(registry, WorkerRegistry)
    return registry


def _admin_guards(config: Config) -> list[Guard]:
    key = config.server.admin_api_key
    return [admin_key_guard(key)] if key else []


def _api_error(request: Request[Any, Any, Any], exc: ApiError) -> Response[bytes]:
    return answer_error(exc)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    return answer_error(ApiError(exc.status_code, str(exc.detail)))


def _internal_error(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    log.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return answer_error(ApiError(500, f"internal error: {type(exc).__name__}"))
