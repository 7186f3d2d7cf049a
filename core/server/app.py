"""The Litestar application, built by a factory from the typed config."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.config.cors import CORSConfig
from litestar.di import NamedDependency, Provide
from litestar.types import ASGIApp, ControllerRouterHandler, Receive, Scope, Send

from turnout.admission.capacity import EngineCapacity
from turnout.admission.metrics import AdmissionMetrics
from turnout.admission.scheduler import Scheduler
from turnout.config import Config, ServerConfig
from turnout.discovery import DiscoveryManager, describe_discovery
from turnout.embeddings import EmbeddingRequest, embed
from turnout.embeddings.vectors import EmbeddingResponse
from turnout.generation import chat, completions, generate
from turnout.generation.context import RequestContext
from turnout.generation.flow import Endpoint, run_endpoint
from turnout.generation.models import ModelTable
from turnout.generation.prompt_size import PromptLimit, limit_from_labels, widest_limit
from turnout.http_workers.relay import HttpRelay, WholeAnswer
from turnout.observability.logs import current_record, random_suffix
from turnout.observability.metrics import CONTENT_TYPE
from turnout.observability.tracing import start_tracing
from turnout.plugin_choice import policies_for, role_policies_for, validate_plugin_names
from turnout.plugin_loader import Plugins, load_plugins
from turnout.responses.background import BackgroundResponses
from turnout.responses.endpoint import ResponsesApi
from turnout.responses.sealing import ReasoningSeal
from turnout.responses.storage import make_storage
from turnout.routing.dispatch import Dispatcher
from turnout.server.anthropic_routes import anthropic_routes
from turnout.server.background_routes import BackgroundRoutes
from turnout.server.context import (
    SERVICES,
    ConfigSource,
    ReloadAll,
    Services,
    ServicesSlot,
    new_request_id,
)
from turnout.server.conversations_routes import conversations_routes
from turnout.server.disclosure import hidden_from_public
from turnout.server.error_handlers import EXCEPTION_HANDLERS
from turnout.server.info import info_routes
from turnout.server.metered_dispatch import MeteredDispatch
from turnout.server.metrics_server import metrics_listener
from turnout.server.middleware import ENDPOINT_APP, OpsMiddleware, OpsState, gate_middleware
from turnout.server.openapi import (
    EVENT_STREAM,
    REQUEST_BODY,
    RESPONSE_BODY,
    openapi_config,
    served_now,
)
from turnout.server.operator_routes import operator_routes
from turnout.server.options import allow_every_method
from turnout.server.preflight import preloaded_models
from turnout.server.protocol import decode_body, read_body
from turnout.server.reload import admin_reload, install_sighup
from turnout.server.respond import answer_generated, answer_json
from turnout.server.responses_routes import responses_routes
from turnout.server.shutdown import drain_hook
from turnout.server.worker_routes import DEPENDENCY as WORKER_REGISTRY
from turnout.server.worker_routes import workers_router
from turnout.tenants import current_tenant
from turnout.workers.adapter_refresh import AdapterRefresher
from turnout.workers.registry import WorkerRegistry
from turnout.workers.remote_tokenizer import RemoteTokenizers

log = logging.getLogger(__name__)


def request_context(
    raw_headers: Iterable[tuple[bytes, bytes]], services: Services, prefix: str
) -> RequestContext:
    """Request id (client-given or new), lower-cased headers and the routing key, from the
    request's headers as the ASGI scope has them.

    The id is the one the ops middleware took from the configured headers; otherwise a new
    ``<prefix>-…`` id, which then becomes the request's id in logs and ``x-request-id``.
    """
    headers = {
        name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw_headers
    }
    server = services.config.server
    record = current_record()
    client_id: str | None
    if record is not None:
        client_id = record.request_id if record.client_id else None
    else:
        client_id = next(
            (headers[name] for name in server.request_id_headers if headers.get(name)), None
        )
    request_id = client_id or new_request_id(prefix)
    if record is not None and client_id is None:
        record.request_id = request_id
    worker_id = f"{client_id}-{random_suffix()}" if client_id else request_id
    routing_key = headers.get(server.routing_key_header.lower())
    return RequestContext(request_id, headers, routing_key, worker_request_id=worker_id)


#: How a generation route answers a decoded request (the endpoint's flow, unless a route
#: answers some requests otherwise: background responses).
Answerer = Callable[[Endpoint[Any], Any, RequestContext, Services], Awaitable[ASGIApp]]


async def generated_answer(
    endpoint: Endpoint[Any], request: Any, ctx: RequestContext, services: Services
) -> ASGIApp:
    """The answer of the endpoint's flow."""
    return answer_generated(await run_endpoint(endpoint, request, ctx, services), services)


class GenerationApp:
    """One generation endpoint as a bare ASGI app: the body read from ``receive``, the headers
    from the scope, the services from their slot (no dependency injection), the answer sent
    as it is. The gate runs it directly (:data:`ENDPOINT_APP`)."""

    __slots__ = ("_answer", "_body_type", "_endpoint", "_prefix", "_services")

    def __init__(
        self,
        prefix: str,
        endpoint: Endpoint[Any],
        services: ServicesSlot,
        answer: Answerer | None = None,
    ) -> None:
        self._prefix = prefix
        self._endpoint = endpoint
        self._body_type = endpoint.request_type
        self._services = services
        self._answer = answer or generated_answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        running = self._services()
        ctx = request_context(scope["headers"], running, self._prefix)
        body = await read_body(receive, running.config.server.max_body_bytes)
        ctx.body_size = len(body)
        relay = running.http_relay
        if relay is not None and relay.models:
            forwarded = await relay.answer(scope["path"], body, ctx, running.models)
            if forwarded is not None:
                await forwarded(scope, receive, send)
                return
        request = decode_body(body, self._body_type)
        answer = await self._answer(self._endpoint, request, ctx, running)
        await answer(scope, receive, send)


def _generation_route(
    path: str,
    prefix: str,
    endpoint: Endpoint[Any],
    services: ServicesSlot,
    answer: Answerer | None = None,
) -> ControllerRouterHandler:
    """The route of one generation endpoint. Litestar routes to it and documents it; the gate
    runs its :class:`GenerationApp` itself, without Litestar's per-request handler work
    (request object, signature, second error layer). The handler, which Litestar would call
    without the gate, returns the same app."""
    body_type = endpoint.request_type
    app = GenerationApp(prefix, endpoint, services, answer)

    @post(
        path,
        name=prefix,
        status_code=200,
        opt={REQUEST_BODY: body_type, ENDPOINT_APP: app, EVENT_STREAM: True},
        summary=body_type.__doc__.split("\n")[0].strip("`. ") if body_type.__doc__ else None,
        description=endpoint.description,
    )
    async def route() -> ASGIApp:
        return app

    return route


@post(
    "/v1/embeddings",
    name="embd",
    status_code=200,
    opt={REQUEST_BODY: EmbeddingRequest, RESPONSE_BODY: EmbeddingResponse},
    summary="Embeddings",
    description="Embed text or token ids: one Embed call on a worker per input.",
)
async def embeddings_route(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Response[bytes]:
    """``POST /v1/embeddings``."""
    ctx = request_context(request.scope["headers"], services, "embd")
    body = await request.body()
    relay = services.http_relay
    if relay is not None and relay.models:
        forwarded = await relay.answer(request.scope["path"], body, ctx, services.models)
        if isinstance(forwarded, WholeAnswer):  # embeddings are answered in one piece
            return forwarded.response()
    answer = await embed(decode_body(body, EmbeddingRequest), ctx, services)
    response = answer_json(answer)
    response.headers["x-request-id"] = ctx.request_id
    return response


def _tokenizer_hint(registry: WorkerRegistry) -> Callable[[str], str | None]:
    def hint(model_id: str) -> str | None:
        for worker in registry.workers_for(model_id):
            for key in ("tokenizer_path", "model_path"):
                if worker.labels.get(key):
                    return worker.labels[key]
        return None

    return hint


def _prompt_limit(registry: WorkerRegistry) -> Callable[[str], PromptLimit | None]:
    def limit(model_id: str) -> PromptLimit | None:
        workers = [w for w in registry.workers_for(model_id) if w.routable]
        return widest_limit(limit_from_labels(worker.labels) for worker in workers)

    return limit


def _visible_models(registry: WorkerRegistry) -> Callable[[], list[str]]:
    """The served models, less those the current request's tenant may not use (for it they
    are not served: 404 and absent from ``/v1/models``)."""

    def served() -> list[str]:
        models = registry.models()
        tenant = current_tenant()
        if tenant is None or tenant.settings.models is None:
            return models
        return [model for model in models if tenant.allows(model)]

    return served


def create_app(
    config: Config,
    *,
    plugins: Plugins | None = None,
    on_startup: Callable[[Services], Awaitable[None]] | None = None,
    config_source: ConfigSource | None = None,
    reload_all: ReloadAll | None = None,
    before: Sequence[Callable[[Litestar], contextlib.AbstractAsyncContextManager[None]]] = (),
) -> Litestar:
    """Build the app. Workers, channels and background tasks live in its lifespan.

    Around the routes: request ids, metrics and the access log (every route), API keys,
    admission control and the request timeout (generation routes), CORS when configured.
    """
    plugins = plugins or load_plugins()
    validate_plugin_names(config, plugins)
    describe_discovery(config.discovery, plugins.discovery)
    ops = OpsState(config.server)
    ops.set_tenants(config)
    if config.admission.enabled:
        ops.admission = Scheduler(
            config.admission,
            config.server.max_concurrent_requests,
            AdmissionMetrics(ops.metrics.registry),
        )
    provide_services = ServicesSlot()
    server = config.server
    # None unless tracing is configured: then nothing of OpenTelemetry's SDK is loaded.
    tracing = start_tracing(config.tracing)
    storage = make_storage(config.responses)
    responses = ResponsesApi(
        storage.responses, storage.conversations, ReasoningSeal(config.responses.reasoning_key)
    )
    background = BackgroundRoutes(
        BackgroundResponses(config.background_responses, responses, config.responses.ttl_s)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        storage.start()
        if tracing is not None:
            tracing.start()
        registry = WorkerRegistry(config.workers_settings())
        policies, default_policy = policies_for(config, plugins)
        dispatcher = Dispatcher(
            registry,
            policies,
            default_policy=default_policy,
            tracing=tracing,
            role_policy=role_policies_for(config, plugins),
        )
        prompt_limit = _prompt_limit(registry)
        models = ModelTable(
            config,
            plugins,
            _visible_models(registry),
            _tokenizer_hint(registry),
            registry.unplaced,
            prompt_limit=prompt_limit,
            worker_adapters=registry.adapters,
            tokenizer_fetch=RemoteTokenizers(registry).fetch,
            adapters_refresh=AdapterRefresher(registry),
        )
        discovery = DiscoveryManager(registry, plugins.discovery)
        metered = MeteredDispatch(
            dispatcher,
            ops.metrics,
            config.server.request_timeout_s or None,
            prompt_limit,
            config.admission.expected_output_tokens,
        )
        if ops.admission is not None and config.admission.engine_capacity:
            capacity = EngineCapacity(registry.all, config.admission)
            ops.admission.capacity = capacity
            # An admitted request goes where admission counted a place for it.
            dispatcher.placement = capacity.with_room
        services = Services(
            config,
            plugins,
            models,
            metered.open_stream,
            metered.embed,
            registry=registry,
            dispatcher=dispatcher,
            discovery=discovery,
            ops=ops,
            config_source=config_source,
            reload_all=reload_all,
            tracing=tracing,
            http_relay=HttpRelay(
                registry,
                dispatcher,
                ops.metrics,
                timeout=config.server.request_timeout_s or None,
                default_max_tokens=config.limits.default_max_tokens,
            ),
        )
        provide_services.services = services

        await models.preload(preloaded_models(config))
        if ops.limiter is not None:
            await ops.limiter.start()
        ops.metrics.workers.attach(registry.all)
        registry.add_listener(
            # A model served over HTTP only needs no tokenizer here.
            lambda model, workers: (
                None if workers and all(w.http for w in workers) else models.ensure_loading(model)
            )
        )
        await registry.start()
        try:
            await discovery.start(config.discovery)
            async with contextlib.AsyncExitStack() as stack:
                stack.enter_context(drain_hook(ops.begin_drain))
                if server.metrics_port is not None:
                    await stack.enter_async_context(
                        metrics_listener(server.host, server.metrics_port, public_metrics)
                    )
                install_sighup(services)
                if on_startup is not None:
                    await on_startup(services)
                yield
        finally:
            ops.begin_drain()
            # Background responses end (aborted on their workers) while the channels are open.
            await background.responses.aclose()
            # Requests cancelled at the end of the grace period abort on their workers now;
            # give those aborts a moment before the channels close.
            if not await ops.wait_idle(5.0):
                log.warning("%d request(s) still running at shutdown", ops.running)
            await discovery.stop()
            if ops.admission is not None:
                await ops.admission.aclose()
            await registry.stop()
            if ops.limiter is not None:
                await ops.limiter.aclose()
            ops.metrics.workers.detach()
            ops.metrics.process_exit()
            await storage.aclose()
            if tracing is not None:
                await tracing.stop()

    def public_metrics() -> bytes:
        """The exposition for a scraper without the admin key."""
        if server.expose_internals:
            return ops.metrics.render()
        return ops.metrics.render(hidden_from_public(ops.tenants))

    @get("/metrics", sync_to_thread=False, include_in_schema=False)
    def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
        """Prometheus metrics (tenant names and the models some tenant may not use for the admin
        key only, unless ``server.expose_internals``)."""
        if ops.keys.admits_admin(request.headers.get("authorization")):
            return Response(ops.metrics.render(), media_type=CONTENT_TYPE)
        return Response(public_metrics(), media_type=CONTENT_TYPE)

    routes: list[ControllerRouterHandler] = [
        _generation_route("/v1/chat/completions", "chatcmpl", chat.ENDPOINT, provide_services),
        _generation_route("/v1/completions", "cmpl", completions.ENDPOINT, provide_services),
        _generation_route("/generate", "gnt", generate.ENDPOINT, provide_services),
        embeddings_route,
        _generation_route(
            "/v1/responses", "resp", responses.endpoint, provide_services, background.answer
        ),
        *responses_routes(responses.store, background),
        *anthropic_routes(provide_services, request_context),
        *conversations_routes(responses.conversations, responses.seal),
        *info_routes(),
        metrics,
        workers_router(),
        admin_reload,
        *operator_routes(),
    ]
    app = Litestar(
        route_handlers=routes,
        lifespan=[*before, lifespan],
        middleware=[
            gate_middleware(ops),
            # The server span of each request (Litestar puts it outermost).
            *([tracing.litestar_middleware()] if tracing is not None else []),
        ],
        cors_config=_cors(server),
        exception_handlers=EXCEPTION_HANDLERS,
        dependencies={
            SERVICES: Provide(provide_services, sync_to_thread=False),
            WORKER_REGISTRY: Provide(_provide_registry, sync_to_thread=False),
        },
        request_max_body_size=server.max_body_bytes,
        openapi_config=openapi_config(served_now(provide_services)),
        # Logging belongs to the process (turnout.observability.logs), not to the app.
        logging_config=None,
        debug=False,
    )
    # Outermost, like Litestar's own CORS wrapper: sees every request, unknown paths included.
    # Of the layers inside it, only tracing's wraps ``send`` for body messages too.
    app.asgi_handler = OpsMiddleware(app.asgi_handler, ops, direct_body=tracing is None)
    allow_every_method(app)
    return app


def _cors(server: ServerConfig) -> CORSConfig | None:
    if not server.cors_allow_origins:
        return None
    return CORSConfig(
        allow_origins=list(server.cors_allow_origins),
        allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
        allow_headers=["*"],
        expose_headers=["x-request-id"],
        max_age=600,
    )


def _provide_registry(services: NamedDependency[Services]) -> WorkerRegistry:
    return services.registry
