"""The /workers admin API over HTTP, with real gRPC test workers behind it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import uvicorn
from litestar import Litestar

from turnout.plugins.policies.simple import RoundRobinPolicy
from turnout.routing.dispatch import Dispatcher
from turnout.routing.types import RoutingRequest
from turnout.server.worker_routes import admin_key_guard, workers_router
from turnout.testing.router import free_port
from turnout.workers.registry import WorkerRegistry

from ._worker import make_request
from .conftest import fast_settings

AUTH = {"Authorization": "Bearer s3cret"}


def make_app(registry: WorkerRegistry) -> Litestar:
    return Litestar(
        route_handlers=[workers_router(registry, guards=[admin_key_guard("s3cret")])],
        on_startup=[registry.start],
        on_shutdown=[registry.stop],
    )


@contextlib.asynccontextmanager
async def serve(app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    """Run ``app`` with uvicorn on 127.0.0.1 in this loop (the gRPC workers share the loop)."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            assert not task.done(), "uvicorn failed to start"
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            yield client
    finally:
        server.should_exit = True
        await task


def assert_openai_error(body: dict, code: str) -> None:
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]


async def test_auth_add_list_get_and_errors(workers) -> None:
    (w,) = await workers(1, model="alpha")
    registry = WorkerRegistry(fast_settings())
    async with serve(make_app(registry)) as client:
        r = await client.get("/workers")
        assert r.status_code == 401
        assert_openai_error(r.json(), "invalid_api_key")
        r = await client.get("/workers", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401

        r = await client.post("/workers?wait_s=3", json={"url": w.url}, headers=AUTH)
        assert r.status_code == 201, r.text
        info = r.json()
        assert info["state"] == "ready"
        assert info["model"] == "alpha"
        assert info["circuit"] == "closed"
        worker_id = info["id"]

        r = await client.post("/workers", json={"url": w.url}, headers=AUTH)
        assert r.status_code == 409
        assert_openai_error(r.json(), "worker_exists")
        r = await client.post("/workers", json={"url": "ftp://x:1"}, headers=AUTH)
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "url"
        r = await client.post("/workers", json={"url": "http://x:1", "dp_size": 2}, headers=AUTH)
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "dp_size"
        r = await client.post("/workers", json={"url": w.url, "bogus": 1}, headers=AUTH)
        assert r.status_code == 400
        assert_openai_error(r.json(), "invalid_value")
        r = await client.post("/workers", json={"nourl": 1}, headers=AUTH)
        assert r.status_code == 400

        r = await client.get("/workers", headers=AUTH)
        listing = r.json()
        assert listing["total"] == 1
        assert listing["stats"]["routable_workers"] == 1
        assert listing["workers"][0]["id"] == worker_id
        assert (await client.get("/workers?model=beta", headers=AUTH)).json()["total"] == 0

        r = await client.get(f"/workers/{worker_id}", headers=AUTH)
        assert r.status_code == 200
        assert r.json()["url"] == w.url
        r = await client.get("/workers/missing:1", headers=AUTH)
        assert r.status_code == 404
        assert_openai_error(r.json(), "worker_not_found")
        r = await client.delete("/workers/missing:1", headers=AUTH)
        assert r.status_code == 404

        # Ids are path segments, log fields and metric labels.
        for bad_id in ("evil\nINFO forged line", "a/b", "tab\there", "x" * 129, "", "\x1b[31m"):
            new = {"url": "grpc://127.0.0.1:8", "id": bad_id}
            r = await client.post("/workers", json=new, headers=AUTH)
            assert r.status_code == 400, (bad_id, r.text)
            assert_openai_error(r.json(), "invalid_value")
            assert r.json()["error"]["param"] == "id"
            assert "worker id" in r.json()["error"]["message"]
        r = await client.post("/workers", json={"url": "grpc://h\x07st:1"}, headers=AUTH)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "url"  # the id would come from the URL
        assert registry.get("x" * 129) is None
        r = await client.post("/workers", json={"url": "grpc://127.0.0.1:7", "id": "x" * 128},
                              headers=AUTH)  # fmt: skip
        assert r.status_code == 201, r.text  # the longest id allowed
        assert (await client.delete("/workers/" + "x" * 128, headers=AUTH)).status_code == 202

        # A worker that is down is accepted (pending) and picked up when it comes up.
        r = await client.post("/workers", json={"url": "grpc://127.0.0.1:9"}, headers=AUTH)
        assert r.status_code == 201
        assert r.json()["state"] == "pending"
    assert all(t.done() for t in registry._tasks.values())


async def test_drain_while_requests_run_loses_nothing(workers) -> None:
    fleet = await workers(2)
    for w in fleet:
        w.chunks = 20
        w.chunk_delay = 0.01
    registry = WorkerRegistry(fast_settings())
    dispatcher = Dispatcher(registry, default_policy=RoundRobinPolicy)
    routing = RoutingRequest(model="m")
    async with serve(make_app(registry)) as client:
        ids = []
        for w in fleet:
            r = await client.post("/workers?wait_s=3", json={"url": w.url}, headers=AUTH)
            assert r.json()["state"] == "ready"
            ids.append(r.json()["id"])
        victim = ids[0]

        results: list[tuple[str, int]] = []

        async def one(i: int) -> None:
            session = await dispatcher.open_stream("m", routing, make_request(f"d{i}"), timeout=10)
            async with session:
                n = len([x async for x in session])
            results.append((session.worker.id, n))

        first_wave = [asyncio.create_task(one(i)) for i in range(6)]
        await asyncio.sleep(0.05)  # all six are streaming, three on the victim
        assert registry.get(victim).in_flight == 3

        r = await client.delete(f"/workers/{victim}", headers=AUTH)
        assert r.status_code == 202
        assert r.json()["state"] == "draining"
        second_wave = [asyncio.create_task(one(i)) for i in range(6, 12)]
        await asyncio.gather(*first_wave, *second_wave)

        assert len(results) == 12
        assert all(n == 21 for _, n in results)  # every request complete, none lost
        assert sum(1 for wid, _ in results if wid == victim) == 3  # no new ones on it
        for _ in range(100):
            if registry.get(victim) is None:
                break
            await asyncio.sleep(0.01)
        r = await client.get(f"/workers/{victim}", headers=AUTH)
        assert r.status_code == 404
        assert [
            w["id"] for w in (await client.get("/workers", headers=AUTH)).json()["workers"]
        ] == [ids[1]]
        # Synchronous removal answers 200 once gone.
        r = await client.delete(f"/workers/{ids[1]}?wait=true", headers=AUTH)
        assert r.status_code == 200
        assert r.json()["state"] == "removed"
        assert registry.all() == []
