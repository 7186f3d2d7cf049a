"""``/workers`` admin API (Litestar): list, inspect, add and drain workers.

Mount :func:`workers_router` into the app. The registry comes by dependency injection under
the name ``worker_registry`` (pass it to :func:`workers_router`, or provide it at the app
layer); pass :func:`admin_key_guard` (or any guard) to protect the routes.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

from litestar import Controller, Response, Router, delete, get, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency, Provide
from litestar.handlers import BaseRouteHandler
from litestar.params import FromPath, FromQuery, JSONBody
from litestar.types import Guard

from turnout.errors import ApiError
from turnout.http_workers.kind import http_worker_problem, is_http_worker
from turnout.server.error_handlers import EXCEPTION_HANDLERS
from turnout.server.query import QueryFlag, query_flag
from turnout.wire import parse_worker_url
from turnout.workers.errors import WorkerConflict, WorkerNotFound
from turnout.workers.ids import default_worker_id, worker_id_problem
from turnout.workers.registry import WorkerRegistry
from turnout.workers.roles import bootstrap_port_problem
from turnout.workers.settings import WorkerSpec
from turnout.workers.worker import Worker, WorkerState

DEPENDENCY = "worker_registry"


def _listing(workers: Sequence[Worker]) -> dict[str, Any]:
    return {
        "workers": [w.info() for w in workers],
        "total": len(workers),
        "stats": {
            "total_workers": len(workers),
            "ready_workers": sum(w.state is WorkerState.READY for w in workers),
            "routable_workers": sum(w.routable for w in workers),
            "total_models": len({w.model_id for w in workers if w.model_id is not None}),
            "total_load": sum(w.load for w in workers),
        },
    }


class WorkersController(Controller):
    """Worker management."""

    path = "/workers"

    @get("/", sync_to_thread=False)
    def list_workers(
        self,
        worker_registry: NamedDependency[WorkerRegistry],
        model: FromQuery[str | None] = None,
    ) -> dict[str, Any]:
        """All workers (``?model=`` filters by served model)."""
        workers = worker_registry.all()
        if model is not None:
            workers = [w for w in workers if w.model_id == model]
        return _listing(workers)

    @get("/{worker_id:str}", sync_to_thread=False)
    def get_worker(
        self, worker_registry: NamedDependency[WorkerRegistry], worker_id: FromPath[str]
    ) -> Response[Any]:
        """One worker's state, load, model and circuit."""
        worker = worker_registry.get(worker_id)
        if worker is None:
            raise _not_found(worker_id)
        return Response(worker.info())

    @post("/")
    async def add_worker(
        self,
        worker_registry: NamedDependency[WorkerRegistry],
        data: JSONBody[WorkerSpec],
        wait_s: FromQuery[float | None] = None,
    ) -> Response[Any]:
        """Register a worker; with ``?wait_s=``, wait that long for it to become ready.

        Answers 201 with the worker (``state`` tells whether it is ready yet).
        """
        if is_http_worker(data):
            http_problem = http_worker_problem(data)
            if http_problem is not None:
                raise ApiError(400, http_problem[1], param=http_problem[0], code="invalid_value")
        else:
            try:
                parse_worker_url(data.url)
            except ValueError as exc:
                raise ApiError(400, str(exc), param="url", code="invalid_value") from None
        worker_id = data.id if data.id is not None else default_worker_id(data.url)
        problem = worker_id_problem(worker_id)
        if problem is not None:
            source = "id" if data.id is not None else "url"
            shown = repr(worker_id[:40]) + ("…" if len(worker_id) > 40 else "")
            raise ApiError(
                400,
                f"worker id {shown}{' (from the url)' if source == 'url' else ''} {problem}",
                param=source,
                code="invalid_value",
            )
        problem = bootstrap_port_problem(data.role, data.bootstrap_port)
        if problem is not None:
            raise ApiError(400, problem, param="bootstrap_port", code="invalid_value")
        if wait_s is not None and not 0 <= wait_s <= 600:
            raise ApiError(
                400, "wait_s must be within [0, 600]", param="wait_s", code="invalid_value"
            )
        try:
            worker = await worker_registry.add(data, wait_s=wait_s)
        except WorkerConflict as exc:
            raise ApiError(409, str(exc), param="url", code="worker_exists") from None
        return Response(worker.info(), status_code=201)

    @delete("/{worker_id:str}", status_code=202)
    async def remove_worker(
        self,
        worker_registry: NamedDependency[WorkerRegistry],
        worker_id: FromPath[str],
        wait: QueryFlag = None,
    ) -> Response[Any]:
        """Drain a worker: no new requests, in-flight ones finish, then it is removed.

        Answers 202 at once (state ``draining``), or 200 after removal with ``?wait=true``.
        """
        try:
            if query_flag(wait, "wait"):
                worker = await worker_registry.remove(worker_id)
                return Response({**worker.info(), "state": "removed"}, status_code=200)
            worker = worker_registry.start_drain(worker_id)
        except WorkerNotFound:
            raise _not_found(worker_id) from None
        return Response(worker.info(), status_code=202)


def _not_found(worker_id: str) -> ApiError:
    return ApiError(404, f"no worker {worker_id!r}", param="worker_id", code="worker_not_found")


def admin_key_guard(api_key: str) -> Guard:
    """A guard requiring ``Authorization: Bearer <api_key>`` (401 otherwise)."""
    expected = api_key.encode()

    def guard(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
        header = connection.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), expected):
            raise ApiError(401, "invalid or missing admin API key", code="invalid_api_key")

    return guard


def workers_router(
    registry: WorkerRegistry | None = None,
    *,
    guards: Sequence[Guard] = (),
    path: str = "/",
) -> Router:
    """The ``/workers`` routes under ``path``.

    With ``registry`` the router provides it itself; otherwise the app must provide a
    dependency named ``worker_registry``.
    """
    dependencies: dict[str, Provide] = {}
    if registry is not None:
        reg = registry

        def provide_registry() -> WorkerRegistry:
            return reg

        dependencies[DEPENDENCY] = Provide(provide_registry, sync_to_thread=False)
    return Router(
        path=path,
        route_handlers=[WorkersController],
        dependencies=dependencies,
        guards=list(guards),
        exception_handlers=EXCEPTION_HANDLERS,
    )
