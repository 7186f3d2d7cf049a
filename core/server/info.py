"""Read-only and utility routes: models, health, readiness, worker info, tokenize, parse."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import msgspec
from google.protobuf import json_format
from litestar import Request, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.types import ControllerRouterHandler

from turnout.errors import ApiError, ParserError, bad_request
from turnout.generation.models import ModelTable
from turnout.generation.prompt_size import render_off_loop
from turnout.plugin_kinds import REASONING_PARSERS, TOOL_PARSERS, PluginKind
from turnout.routing.types import RoutingRequest
from turnout.server.context import Services, new_request_id
from turnout.server.disclosure import without_paths
from turnout.server.openapi import REQUEST_BODY
from turnout.server.protocol import (
    DetokenizeRequest,
    ParseFunctionCallRequest,
    ParseReasoningRequest,
    TokenizeRequest,
    decode_body,
)
from turnout.server.respond import answer_json
from turnout.tokenizer import ChatTemplateError
from turnout.wire.sampling import build_generate_request, build_sampling_params
from turnout.workers.registry import WorkerRegistry
from turnout.workers.worker import Worker, WorkerState

T = TypeVar("T")


def _ready_worker(services: Services, model: str) -> Worker:
    for worker in services.registry.workers_for(model):
        if worker.routable:
            return worker
    raise ApiError(503, f"no ready worker for model {model!r}")


@get("/health", sync_to_thread=False)
def health() -> Any:
    """Liveness of the process itself."""
    return answer_json({"status": "ok"})


@get("/liveness", sync_to_thread=False)
def liveness() -> Any:
    """Alias of /health (Kubernetes liveness probes)."""
    return answer_json({"status": "ok"})


@get("/readiness", sync_to_thread=False)
def readiness(services: NamedDependency[Services]) -> Any:
    """Ready when not draining and every served model has a ready worker and its tokenizer.

    Workers that cannot take requests are listed under ``workers`` with their state and the
    last failure (by id; the worker's address is left out)."""
    if services.draining:
        return answer_json({"status": "not ready", "reason": "shutting down"}, 503)
    registry = services.registry
    waiting = _waiting_workers(registry)
    models = services.models.served()
    if not models:
        reason = "no worker is ready yet" if waiting else "no workers registered"
        return answer_json({"status": "not ready", "reason": reason, **waiting}, 503)
    problems = {}
    for model in models:
        problem = registry.readiness_problem(model)
        if problem is not None:
            problems[model] = problem
        elif not services.models.loaded(model) and not _forwarded(services, model):
            problems[model] = "tokenizer not loaded yet"
    if problems:
        return answer_json({"status": "not ready", "models": problems, **waiting}, 503)
    return answer_json({"status": "ready", "models": models, **waiting})


def _forwarded(services: Services, model: str) -> bool:
    """Whether ``model``'s requests go to its HTTP workers (no tokenizer needed here)."""
    relay = services.http_relay
    return relay is not None and relay.forwards(model)


def _waiting_workers(registry: WorkerRegistry) -> dict[str, Any]:
    """``{"workers": {id: {state, model, reason}}}`` for workers not ready, or nothing."""
    waiting = {}
    for worker in registry.all():
        if worker.state is WorkerState.READY:
            continue
        reason = worker.last_error or "not reached yet"
        waiting[worker.id] = {
            "state": worker.state.value,
            "model": worker.model_id,
            "reason": reason.replace(f"{worker.url}: ", "").replace(worker.url, worker.id),
        }
    return {"workers": waiting} if waiting else {}


def _model_card(models: ModelTable, model: str, adapter: str | None = None) -> dict[str, Any]:
    """A ``/v1/models`` entry; a LoRA adapter is ``<model>:<adapter>`` with its ``parent``
    model and its ``root`` (where it was loaded from), as SGLang and vLLM list adapters."""
    if adapter is None:
        return {"id": model, "object": "model", "created": models.created, "owned_by": "turnout"}
    return {
        "id": f"{model}:{adapter}",
        "object": "model",
        "created": models.created,
        "owned_by": "turnout",
        "root": models.adapters(model).get(adapter, adapter),
        "parent": model,
    }


@get("/v1/models", sync_to_thread=False)
def list_models(services: NamedDependency[Services]) -> Any:
    """Served models and their LoRA adapters, OpenAI style."""
    models = services.models
    data = []
    for model in models.served():
        data.append(_model_card(models, model))
        data.extend(_model_card(models, model, adapter) for adapter in models.adapters(model))
    return answer_json({"object": "list", "data": data})


@get("/v1/models/{model_id:path}", sync_to_thread=False)
def get_model(services: NamedDependency[Services], model_id: FromPath[str]) -> Any:
    """One served model, or one of its LoRA adapters."""
    models = services.models
    model, adapter = models.resolve_model(model_id.lstrip("/"))
    return answer_json(_model_card(models, model, adapter))


async def _unary(worker: Worker, method: str) -> dict[str, Any]:
    client = getattr(worker.connection, "client", None)
    if client is None:
        raise ApiError(501, f"{method} is not available for this worker")
    response = await getattr(client, method)()
    result: dict[str, Any] = json_format.MessageToDict(response, preserving_proto_field_name=True)
    return result


async def _worker_info(
    services: Services, model: str | None, method: str, request: Request[Any, Any, Any]
) -> Any:
    worker = _ready_worker(services, services.models.resolve_name(model))
    info = await _unary(worker, method)
    shown = services.config.server.expose_internals or services.ops.keys.admits_admin(
        request.headers.get("authorization")
    )
    return answer_json(info if shown else without_paths(info))


@get("/get_model_info")
async def get_model_info(
    request: Request[Any, Any, Any],
    services: NamedDependency[Services],
    model: FromQuery[str | None] = None,
) -> Any:
    """The worker's GetModelInfo answer for a served model (file paths cut to their last part
    without the admin key, unless ``server.expose_internals``)."""
    return await _worker_info(services, model, "get_model_info", request)


@get("/get_server_info")
async def get_server_info(
    request: Request[Any, Any, Any],
    services: NamedDependency[Services],
    model: FromQuery[str | None] = None,
) -> Any:
    """The worker's GetServerInfo answer for a served model (file paths as for
    ``/get_model_info``)."""
    return await _worker_info(services, model, "get_server_info", request)


@get("/health_generate")
async def health_generate(
    services: NamedDependency[Services], model: FromQuery[str | None] = None
) -> Any:
    """A real one-token generation through a worker of each (or the given) model."""
    models = [services.models.resolve_name(model)] if model else services.models.served()
    if not models:
        raise ApiError(503, "no workers registered")
    for model_id in models:
        runtime = await services.models.runtime(model_id)
        ids = runtime.tokenizer.encode("ping", add_special_tokens=False) or [0]
        rid = new_request_id("health")
        grpc_request = build_generate_request(
            request_id=rid,
            input_ids=ids,
            sampling_params=build_sampling_params(max_new_tokens=1, temperature=0.0),
            stream=True,
        )
        session = await services.open_stream(model_id, RoutingRequest(model_id, ids), grpc_request)
        try:
            async with asyncio.timeout(30):
                while batch := await session.next_batch():
                    if any(r.WhichOneof("response") == "complete" for r in batch):
                        break
        except TimeoutError:
            raise ApiError(504, f"health generation for {model_id!r} timed out") from None
        finally:
            await session.aclose()
    return answer_json({"status": "ok", "models": models})


@post("/v1/tokenize", status_code=200, opt={REQUEST_BODY: TokenizeRequest})
async def tokenize(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Any:
    """Token ids of a text, a list of texts, or chat messages (long ones off the event loop)."""
    raw = await request.body()
    body = decode_body(raw, TokenizeRequest)
    model = services.models.resolve_name(body.model)
    runtime = await services.models.runtime(model)
    tokenizer = runtime.tokenizer
    limit = runtime.prompt_limit()
    max_model_len = limit.context_length if limit is not None else None
    if body.messages is not None:
        messages = [msgspec.to_builtins(message) for message in body.messages]
        try:
            text = await render_off_loop(
                len(raw), tokenizer.apply_chat_template, messages, body.tools
            )
        except ChatTemplateError as exc:
            raise ApiError(400, f"chat template error: {exc}", code="chat_template_error") from None
        ids = await tokenizer.encode_off_loop(text, add_special_tokens=False)
        return answer_json(
            {"tokens": ids, "count": len(ids), "max_model_len": max_model_len, "prompt": text}
        )
    prompt = body.prompt if body.prompt is not None else body.text
    add_special = body.add_special_tokens
    if isinstance(prompt, str):
        ids = await tokenizer.encode_off_loop(prompt, add_special)
        return answer_json({"tokens": ids, "count": len(ids), "max_model_len": max_model_len})
    batch = [await tokenizer.encode_off_loop(text, add_special) for text in prompt or []]
    return answer_json(
        {"tokens": batch, "count": [len(ids) for ids in batch], "max_model_len": max_model_len}
    )


@post("/v1/detokenize", status_code=200, opt={REQUEST_BODY: DetokenizeRequest})
async def detokenize(request: Request[Any, Any, Any], services: NamedDependency[Services]) -> Any:
    """Text of token ids (a list, or a list of lists)."""
    body = decode_body(await request.body(), DetokenizeRequest)
    model = services.models.resolve_name(body.model)
    tokenizer = (await services.models.runtime(model)).tokenizer
    vocab = tokenizer.vocab_size
    rows = [row if isinstance(row, list) else [row] for row in body.tokens]
    if any(t >= vocab for row in rows for t in row):
        raise bad_request(f"token ids must be in [0, {vocab})", "tokens")
    skip = body.skip_special_tokens
    if body.tokens and isinstance(body.tokens[0], list):
        return answer_json({"text": tokenizer.decode_batch(rows, skip_special_tokens=skip)})
    ids = [t for t in body.tokens if isinstance(t, int)]
    return answer_json({"text": tokenizer.decode(ids, skip_special_tokens=skip)})


@post("/parse/function_call", status_code=200, opt={REQUEST_BODY: ParseFunctionCallRequest})
async def parse_function_call(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Any:
    """Run a tool parser (named, or the model's) over a text."""
    body = decode_body(await request.body(), ParseFunctionCallRequest)
    name = body.tool_call_parser or body.parser
    name, parser = _plugin(services, TOOL_PARSERS, name, body.model, "tool_call_parser")
    try:
        result = parser.parse_complete(body.text, body.tools)
    except Exception as exc:
        raise ParserError("tool", name, exc) from exc
    calls = [{"name": call.name, "arguments": call.arguments} for call in result.calls]
    return answer_json({"normal_text": result.normal_text, "calls": calls})


@post("/parse/reasoning", status_code=200, opt={REQUEST_BODY: ParseReasoningRequest})
async def parse_reasoning(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Any:
    """Run a reasoning parser (named, or the model's) over a text."""
    body = decode_body(await request.body(), ParseReasoningRequest)
    name = body.reasoning_parser or body.parser
    name, parser = _plugin(services, REASONING_PARSERS, name, body.model, "reasoning_parser")
    try:
        reasoning = parser.parse_complete(body.text)
    except Exception as exc:
        raise ParserError("reasoning", name, exc) from exc
    return answer_json(
        {"reasoning_text": reasoning.reasoning_text, "normal_text": reasoning.normal_text}
    )


def _plugin(
    services: Services, kind: PluginKind[T], name: str | None, model: str | None, key: str
) -> tuple[str, T]:
    """The parser's registered name and a fresh instance (400 when none applies)."""
    registry = services.plugins[kind]
    if name is None:
        model_id = services.models.resolve_name(model)
        name = services.models.choice(model_id, kind.key)
        if name is None:
            raise bad_request(f"no {registry.kind} applies to model {model_id!r}; name one", key)
    if name not in registry:
        raise bad_request(
            f"unknown {registry.kind} {name!r}; valid names: {', '.join(registry.names())}", key
        )
    return registry.canonical(name), registry.create(name)


def info_routes() -> list[ControllerRouterHandler]:
    """Every route of this module."""
    return [
        health, liveness, readiness, list_models, get_model, get_model_info, get_server_info,
        health_generate, tokenize, detokenize, parse_function_call, parse_reasoning,
    ]  # fmt: skip
