"""The gate runs a generation route's endpoint app itself (``ENDPOINT_APP`` in the route's
``opt``), not through Litestar's handler machinery: the request timeout, the app's own errors
and its answer must come out as they do through Litestar. A small app with the real ops layer
(ops middleware, gate, error handlers), called in process."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from litestar import Litestar, post
from litestar.types import ASGIApp, Receive, Scope, Send

from turnout.config import ServerConfig
from turnout.errors import ApiError
from turnout.server.error_handlers import EXCEPTION_HANDLERS
from turnout.server.middleware import ENDPOINT_APP, OpsMiddleware, OpsState, gate_middleware
from turnout.server.protocol import read_body
from turnout.server.respond import JsonAnswer


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    body = await read_body(receive, 1000)
    await JsonAnswer(b'{"echo":%d}' % len(body))(scope, receive, send)


async def own_timeout(scope: Scope, receive: Receive, send: Send) -> None:
    raise TimeoutError("a wait of the app's own")


async def refuses(scope: Scope, receive: Receive, send: Send) -> None:
    raise ApiError(400, "no", code="refused")


async def slow(scope: Scope, receive: Receive, send: Send) -> None:
    await asyncio.sleep(60)


def app_with(endpoint: ASGIApp, request_timeout_s: float = 30.0) -> Litestar:
    ops = OpsState(ServerConfig(request_timeout_s=request_timeout_s))

    @post("/generate", opt={ENDPOINT_APP: endpoint})
    async def route() -> ASGIApp:
        raise AssertionError("the gate runs the endpoint app itself")

    app = Litestar(
        route_handlers=[route],
        middleware=[gate_middleware(ops)],
        exception_handlers=EXCEPTION_HANDLERS,
        logging_config=None,
    )
    app.asgi_handler = OpsMiddleware(app.asgi_handler, ops)
    return app


async def post_to(app: Litestar, body: Any = None) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://router") as client:
        return await client.post("/generate", json=body or {"text": "hi"}, timeout=30)


async def test_the_endpoint_app_answers_with_the_request_id() -> None:
    response = await post_to(app_with(echo), {"text": "hello"})
    assert response.status_code == 200
    assert response.json() == {"echo": len(b'{"text":"hello"}')}
    assert response.headers["x-request-id"].startswith("req-")


async def test_an_error_of_the_endpoint_app_is_answered_as_json() -> None:
    response = await post_to(app_with(refuses))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "refused"
    assert "x-request-id" in response.headers


async def test_an_oversized_body_is_413() -> None:
    response = await post_to(app_with(echo), {"text": "x" * 2000})
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


async def test_a_timeout_error_of_the_app_itself_is_not_the_request_timeout() -> None:
    response = await post_to(app_with(own_timeout))
    assert response.status_code == 500
    assert response.json()["error"]["message"] == "internal error: TimeoutError"


async def test_the_request_timeout_cuts_a_slow_endpoint_app() -> None:
    response = await post_to(app_with(slow, request_timeout_s=0.2))
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "request_timeout"
