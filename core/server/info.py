"""Read-only and utility routes: models, health, readiness, worker info, tokenize, parse."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from google.protobuf import json_format
from litestar import Request, get, post
from litestar.params import FromPath, FromQuery
from litestar.types import ControllerRouterHandler

from turnout.routing.types import RoutingRequest
from turnout.server.context import Services, new_request_id
from turnout.server.errors import ApiError, bad_request
from turnout.server.respond import answer_json
from turnout.tool_calls.types import ToolParser
from turnout.wire.sampling import build_generate_request, build_sampling_params
from turnout.workers.registry import WorkerRegistry
from turnout.workers.worker import Worker


def _services(request: Request[Any, Any, Any]) -> Services:
    services: Services = request.app.state["services"]
    return services


def _registry(services: Services) -> WorkerRegistry:
    registry = services.extras["registry"]
    assert isinstance(registry, WorkerRegistry)
    return registry


def _json(body: bytes) -> dict[str, Any]:
    try:
        data = msgspec.json.decode(body) if body else {}
    except msgspec.DecodeError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request("request body must be a JSON object")
    return data


def _ready_worker(services: Services, model: str) -> Worker:
    for worker in _registry(services).workers_for(model):
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
def readiness(request: Request[Any, Any, Any]) -> Any:
    """Ready when not draining and every served model has a ready worker and its tokenizer."""
    services = _services(request)
    if services.draining:
        return answer_json({"status": "not ready", "reason": "shutting down"}, 503)
    registry = _registry(services)
    models = services.models.served()
    if not models:
        return answer_json({"status": "not ready", "reason": "no workers registered"}, 503)
    problems = {}
    for model in models:
        if not registry.has_ready_worker(model):
            problems[model] = "no healthy worker"
        elif not services.models.loaded(model):
            problems[model] = "tokenizer not loaded yet"
    if problems:
        return answer_json({"status": "not ready", "models": problems}, 503)
    return answer_json({"status": "ready", "models": models})


@get("/v1/models", sync_to_thread=False)
def list_models(request: Request[Any, Any, Any]) -> Any:
    """Served models, OpenAI style."""
    services = _services(request)
    created = int(time.time())
    data = [
        {"id": model, "object": "model", "created": created, "owned_by": "turnout"}
        for model in services.models.served()
    ]
    return answer_json({"object": "list", "data": data})


@get("/v1/models/{model_id:path}", sync_to_thread=False)
def get_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Any:
    """One served model."""
    model = _services(request).models.resolve_name(model_id.lstrip("/"))
    return answer_json({"id": model, "object": "model", "created": 0, "owned_by": "turnout"})


async def _unary(worker: Worker, method: str) -> dict[str, Any]:
    client = getattr(worker.connection, "client", None)
    if client is None:
        raise ApiError(501, f"{method} is not available for this worker")
    response = await getattr(client, method)()
    result: dict[str, Any] = json_format.MessageToDict(response, preserving_proto_field_name=True)
    return result


async def _worker_info(request: Request[Any, Any, Any], model: str | None, method: str) -> Any:
    services = _services(request)
    worker = _ready_worker(services, services.models.resolve_name(model))
    return answer_json(await _unary(worker, method))


@get("/get_model_info")
async def get_model_info(
    request: Request[Any, Any, Any], model: FromQuery[str | None] = None
) -> Any:
    """The worker's GetModelInfo answer for a served model."""
    return await _worker_info(request, model, "get_model_info")


@get("/get_server_info")
async def get_server_info(
    request: Request[Any, Any, Any], model: FromQuery[str | None] = None
) -> Any:
    """The worker's GetServerInfo answer for a served model."""
    return await _worker_info(request, model, "get_server_info")


@get("/health_generate")
async def health_generate(
    request: Request[Any, Any, Any], model: FromQuery[str | None] = None
) -> Any:
    """A real one-token generation through a worker of each (or the given) model."""
    services = _services(request)
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


@post("/v1/tokenize", status_code=200)
async def tokenize(request: Request[Any, Any, Any]) -> Any:
    """Token ids of a text, a list of texts, or chat messages."""
    services = _services(request)
    data = _json(await request.body())
    model = services.models.resolve_name(data.get("model"))
    tokenizer = (await services.models.runtime(model)).tokenizer
    add_special = bool(data.get("add_special_tokens", True))
    if "messages" in data:
        text = tokenizer.apply_chat_template(data["messages"], data.get("tools"))
        ids = tokenizer.encode(text, add_special_tokens=False)
        return answer_json({"tokens": ids, "count": len(ids), "prompt": text})
    prompt = data.get("prompt", data.get("text"))
    if isinstance(prompt, str):
        ids = tokenizer.encode(prompt, add_special_tokens=add_special)
        return answer_json({"tokens": ids, "count": len(ids), "max_model_len": None})
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        batch = tokenizer.encode_batch(prompt, add_special_tokens=add_special)
        return answer_json({"tokens": batch, "count": [len(ids) for ids in batch]})
    raise bad_request("give prompt (a string or list of strings) or messages", "prompt")


@post("/v1/detokenize", status_code=200)
async def detokenize(request: Request[Any, Any, Any]) -> Any:
    """Text of token ids (a list, or a list of lists)."""
    services = _services(request)
    data = _json(await request.body())
    model = services.models.resolve_name(data.get("model"))
    tokenizer = (await services.models.runtime(model)).tokenizer
    tokens = data.get("tokens")
    skip = bool(data.get("skip_special_tokens", False))
    vocab = tokenizer.vocab_size
    if isinstance(tokens, list) and all(isinstance(t, int) for t in tokens):
        if any(not 0 <= t < vocab for t in tokens):
            raise bad_request(f"token ids must be in [0, {vocab})", "tokens")
        return answer_json({"text": tokenizer.decode(tokens, skip_special_tokens=skip)})
    if isinstance(tokens, list) and all(
        isinstance(row, list) and all(isinstance(t, int) and 0 <= t < vocab for t in row)
        for row in tokens
    ):
        return answer_json({"text": tokenizer.decode_batch(tokens, skip_special_tokens=skip)})
    raise bad_request("tokens must be token ids or a list of token-id lists", "tokens")


@post("/parse/function_call", status_code=200)
async def parse_function_call(request: Request[Any, Any, Any]) -> Any:
    """Run a tool parser (named, or the model's) over a text."""
    services = _services(request)
    data = _json(await request.body())
    text = data.get("text")
    if not isinstance(text, str):
        raise bad_request("text must be a string", "text")
    parser: ToolParser = _plugin(services, "tool_parsers", data, "tool_call_parser")
    result = parser.parse_complete(text, data.get("tools"))
    calls = [{"name": call.name, "arguments": call.arguments} for call in result.calls]
    return answer_json({"normal_text": result.normal_text, "calls": calls})


@post("/parse/reasoning", status_code=200)
async def parse_reasoning(request: Request[Any, Any, Any]) -> Any:
    """Run a reasoning parser (named, or the model's) over a text."""
    services = _services(request)
    data = _json(await request.body())
    text = data.get("text")
    if not isinstance(text, str):
        raise bad_request("text must be a string", "text")
    parser = _plugin(services, "reasoning_parsers", data, "reasoning_parser")
    result = parser.parse_complete(text)
    return answer_json({"reasoning_text": result.reasoning_text, "normal_text": result.normal_text})


def _plugin(services: Services, kind: str, data: dict[str, Any], key: str) -> Any:
    registry = services.plugins.registry(kind)
    name = data.get(key) or data.get("parser")
    if name is None:
        model = services.models.resolve_name(data.get("model"))
        name = services.models.choice(model, kind)
        if name is None:
            raise bad_request(f"no {registry.kind} applies to model {model!r}; name one", key)
    if not isinstance(name, str) or name not in registry:
        raise bad_request(
            f"unknown {registry.kind} {name!r}; valid names: {', '.join(registry.names())}", key
        )
    return registry.create(name)


def info_routes() -> list[ControllerRouterHandler]:
    """Every route of this module."""
    return [
        health, liveness, readiness, list_models, get_model, get_model_info, get_server_info,
        health_generate, tokenize, detokenize, parse_function_call, parse_reasoning,
    ]  # fmt: skip
