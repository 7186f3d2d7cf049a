"""Operator routes (admin key): LoRA adapters loaded and unloaded on a model's workers at run
time, the workers' prefix caches flushed, their profilers started and stopped.

``POST /admin/load_lora_adapter``, ``/admin/unload_lora_adapter``, ``/admin/flush_cache``,
``/admin/start_profile`` and ``/admin/stop_profile`` (SGLang's names, under ``/admin``). Each
calls every worker of the model (all workers when ``model`` is left out, for the cache and the
profiler) at once and answers what each said: 200 when all succeeded, 409 when a worker refused
(``worker_refused``), 503 when one could not be reached (``worker_unavailable``). A loaded
adapter is routable at once (``model: "base:adapter"``) and unknown (404) after its unload.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

import msgspec
from litestar import Request, Response, post
from litestar.di import NamedDependency

from turnout.errors import ApiError
from turnout.server.context import Services
from turnout.server.openapi import OPTIONAL_BODY, REQUEST_BODY
from turnout.server.respond import answer_json
from turnout.wire import WorkerClient, common_pb
from turnout.workers.operations import Answer, WorkerOutcome, fan_out
from turnout.workers.worker import Worker

__all__ = ["operator_routes"]

#: Deadline of the adapter refresh that follows a load or unload.
_REFRESH_TIMEOUT_S = 10.0

Name = Annotated[str, msgspec.Meta(pattern=r"^\S+$", max_length=256)]


class _Body(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Base of the route bodies: unknown keys are errors."""


class LoadAdapterBody(_Body):
    model: str
    lora_name: Name
    #: Where the workers read the adapter's weights from (a path on their hosts).
    lora_path: Annotated[str, msgspec.Meta(min_length=1)]
    pinned: bool = False


class UnloadAdapterBody(_Body):
    model: str
    lora_name: Name


class FlushCacheBody(_Body):
    model: str | None = None
    #: How long each worker waits for its running requests to finish before flushing.
    timeout_s: Annotated[float, msgspec.Meta(ge=0, le=600)] = 0.0


class StartProfileBody(_Body):
    model: str | None = None
    output_dir: str | None = None
    start_step: Annotated[int, msgspec.Meta(ge=0)] | None = None
    num_steps: Annotated[int, msgspec.Meta(ge=1)] | None = None
    activities: list[str] = msgspec.field(default_factory=list)
    with_stack: bool | None = None
    record_shapes: bool | None = None
    profile_by_stage: bool = False


class StopProfileBody(_Body):
    model: str | None = None


_B = TypeVar("_B", bound=_Body)


async def _body(request: Request[Any, Any, Any], kind: type[_B]) -> _B:
    raw = await request.body()
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except msgspec.ValidationError as exc:
        raise ApiError(400, f"invalid request body: {exc}", code="invalid_value") from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}", code="invalid_json") from None


def _model_workers(services: Services, model: str) -> tuple[str, list[Worker]]:
    """The model id ``model`` names (404 when unknown) and its workers."""
    model_id = services.models.resolve_name(model)
    return model_id, services.registry.workers_for(model_id)


def _workers(services: Services, model: str | None) -> tuple[str | None, list[Worker]]:
    """The workers of ``model``, or every worker."""
    if model is None:
        return None, services.registry.all()
    return _model_workers(services, model)


def _answer(model: str | None, outcomes: Sequence[WorkerOutcome], **extra: Any) -> Response[bytes]:
    """200 with every outcome, or the error naming the workers that failed."""
    if not outcomes:
        where = f"model {model!r}" if model else "this router"
        raise ApiError(503, f"{where} has no workers", code="no_workers")
    failed = [o for o in outcomes if not o.success]
    if failed:
        detail = "; ".join(f"worker {o.worker_id}: {o.message}" for o in failed)
        if any(not o.answered for o in failed):
            raise ApiError(503, detail, code="worker_unavailable")
        raise ApiError(409, detail, code="worker_refused")
    return answer_json({"model": model, **extra, "workers": [o.as_dict() for o in outcomes]})


@post(
    "/admin/load_lora_adapter",
    status_code=200,
    opt={REQUEST_BODY: LoadAdapterBody, OPTIONAL_BODY: True},
)
async def load_lora_adapter(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Response[bytes]:
    """Load a LoRA adapter on every worker of a model (admin route)."""
    body = await _body(request, LoadAdapterBody)
    model_id, workers = _model_workers(services, body.model)
    if body.lora_name in services.registry.adapters(model_id):
        raise ApiError(
            409,
            f"model {model_id!r} already has a LoRA adapter {body.lora_name!r}",
            param="lora_name",
            code="adapter_exists",
        )
    lora_id = uuid.uuid4().hex

    async def load(worker: Worker, client: WorkerClient) -> Answer:
        return await client.load_lora_adapter(
            body.lora_name, body.lora_path, lora_id, pinned=body.pinned
        )

    outcomes = await fan_out(workers, load)
    await services.registry.refresh_adapters(model_id, _REFRESH_TIMEOUT_S)
    return _answer(model_id, outcomes, lora_name=body.lora_name, lora_id=lora_id)


@post(
    "/admin/unload_lora_adapter",
    status_code=200,
    opt={REQUEST_BODY: UnloadAdapterBody, OPTIONAL_BODY: True},
)
async def unload_lora_adapter(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Response[bytes]:
    """Unload a LoRA adapter from every worker of a model that has it (admin route)."""
    body = await _body(request, UnloadAdapterBody)
    model_id, workers = _model_workers(services, body.model)
    holding = [w for w in workers if w.adapters is not None and body.lora_name in w.adapters]
    if not holding:
        raise ApiError(
            404,
            f"no worker of model {model_id!r} has a LoRA adapter {body.lora_name!r}",
            param="lora_name",
            code="adapter_not_found",
        )

    async def unload(worker: Worker, client: WorkerClient) -> Answer:
        adapter = (worker.adapters or {}).get(body.lora_name)
        lora_id = adapter.lora_id if adapter is not None else ""
        return await client.unload_lora_adapter(body.lora_name, lora_id)

    outcomes = await fan_out(holding, unload)
    await services.registry.refresh_adapters(model_id, _REFRESH_TIMEOUT_S)
    return _answer(model_id, outcomes, lora_name=body.lora_name)


@post(
    "/admin/flush_cache", status_code=200, opt={REQUEST_BODY: FlushCacheBody, OPTIONAL_BODY: True}
)
async def flush_cache(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Response[bytes]:
    """Flush the prefix cache of every worker (of ``model``, when given) (admin route)."""
    body = await _body(request, FlushCacheBody)
    model_id, workers = _workers(services, body.model)

    async def flush(worker: Worker, client: WorkerClient) -> Answer:
        return await client.flush_cache(idle_wait_s=body.timeout_s)

    return _answer(model_id, await fan_out(workers, flush))


@post(
    "/admin/start_profile",
    status_code=200,
    opt={REQUEST_BODY: StartProfileBody, OPTIONAL_BODY: True},
)
async def start_profile(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Response[bytes]:
    """Start the profiler of every worker (of ``model``, when given) (admin route)."""
    body = await _body(request, StartProfileBody)
    model_id, workers = _workers(services, body.model)
    start = common_pb.StartProfileRequest(
        activities=body.activities, profile_by_stage=body.profile_by_stage
    )
    for name in ("output_dir", "start_step", "num_steps", "with_stack", "record_shapes"):
        value = getattr(body, name)
        if value is not None:  # optional fields: set only what the operator gave
            setattr(start, name, value)

    async def begin(worker: Worker, client: WorkerClient) -> Answer:
        return await client.start_profile(start)

    return _answer(model_id, await fan_out(workers, begin))


@post(
    "/admin/stop_profile", status_code=200, opt={REQUEST_BODY: StopProfileBody, OPTIONAL_BODY: True}
)
async def stop_profile(
    request: Request[Any, Any, Any], services: NamedDependency[Services]
) -> Response[bytes]:
    """Stop the profiler of every worker (of ``model``, when given) (admin route)."""
    body = await _body(request, StopProfileBody)
    model_id, workers = _workers(services, body.model)

    async def stop(worker: Worker, client: WorkerClient) -> Answer:
        return await client.stop_profile()

    return _answer(model_id, await fan_out(workers, stop))


def operator_routes() -> list[Any]:
    """The operator route handlers, to mount in the app."""
    return [load_lora_adapter, unload_lora_adapter, flush_cache, start_profile, stop_profile]
