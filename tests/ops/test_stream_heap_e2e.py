"""What open streams cost the garbage collector, through the real router (uvicorn under the
connection guard, a paced simulated worker in its own process, clients on raw sockets): the
objects the HTTP/SSE side keeps tracked per open stream, and the cyclic garbage left behind
when clients disconnect mid-stream or close their connections (none: each connection's objects
are freed by reference counting, so no collection has to find and free them)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import json
import socket
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.server.harness import MODEL, Router, run_router
from turnout.sim import SimProcess

uvloop = pytest.importorskip("uvloop")

K = 20
CHAT = "/v1/chat/completions"
#: Modules of the HTTP/SSE side of a stream (the objects these tests hold to a budget).
SERVER_MODULES = ("turnout.server.", "turnout.observability.logs", "turnout.deadlines")
#: Modules of plain containers, callables and loop objects: counted as the server side's when
#: one of its objects holds them directly (a closure's cells, a coroutine's locals, an object's
#: list, event, timer or context).
GENERIC_MODULES = frozenset(
    [
        "builtins",
        "collections",
        "asyncio.locks",
        "asyncio.events",
        "_asyncio",
        "_contextvars",
        "uvloop.loop",
    ]
)
#: Tracked objects of the server side per open stream: measured 40.9 (58.6 before closures,
#: events, coroutine frames and per-stream timers went; uvicorn, httptools and Litestar objects
#: count only where the server side holds them directly). The request head limits added 7:
#: one head count, and the parser and its callbacks, which are turnout's now (httptools' parser
#: and the same bound methods were there before, uncounted).
SERVER_BUDGET = 44


def _module(obj: object) -> str:
    if isinstance(obj, types.CoroutineType):
        frame = obj.cr_frame
        return str(frame.f_globals.get("__name__", "")) if frame is not None else ""
    if isinstance(obj, types.FunctionType):
        return str(obj.__module__)
    if isinstance(obj, types.MethodType):
        return str(getattr(obj.__func__, "__module__", ""))
    return type(obj).__module__


def _generic(obj: object) -> bool:
    if isinstance(obj, types.CoroutineType | types.FunctionType):
        return False  # the next layer's code, not the server side's own
    return type(obj).__module__ in GENERIC_MODULES


def _server_side(obj: object) -> bool:
    return _module(obj).startswith(SERVER_MODULES)


def _label(obj: object) -> str:
    if isinstance(obj, types.CoroutineType):
        return f"coroutine {obj.cr_code.co_qualname}"
    if isinstance(obj, types.FunctionType | types.MethodType):
        return f"{type(obj).__name__} {obj.__qualname__}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _request(port: int, max_tokens: int) -> bytes:
    body = json.dumps(
        {
            "model": MODEL,
            "messages": [{"role": "user", "content": "tell me a long story"}],
            "stream": True,
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }
    ).encode()
    return (
        f"POST {CHAT} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


def _open_streams(router: Router, count: int, max_tokens: int = 100_000) -> list[socket.socket]:
    """``count`` connections, each with a stream that has sent its first event."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", router.port), timeout=30)
        sock.sendall(_request(router.port, max_tokens))
        socks.append(sock)
    for sock in socks:
        seen = b""
        while b"data: " not in seen:
            chunk = sock.recv(65536)
            assert chunk, "the stream ended before its first event"
            seen += chunk
        assert seen.startswith(b"HTTP/1.1 200 "), seen[:200]
    return socks


def _requests_running(router: Router) -> int:
    async def count() -> int:
        return sum(
            1
            for task in asyncio.all_tasks()
            if getattr(task.get_coro(), "__qualname__", "") == "RequestResponseCycle.run_asgi"
        )

    result: int = router.call(count)
    return result


def _wait_no_requests(router: Router) -> None:
    router.wait_until(lambda: _requests_running(router) == 0, timeout=20)
    time.sleep(0.2)  # the connections' last callbacks


@contextlib.contextmanager
def _router_on_uvloop(*sim_flags: str) -> Iterator[Router]:
    with SimProcess(
        "--served-model-name",
        MODEL,
        "--transport",
        "native",
        "--tokens-per-chunk",
        "4",
        "--delay-ms",
        "20",
        *sim_flags,
    ) as sim:
        config: dict[str, Any] = {"workers": [{"url": sim.url, "model": MODEL}]}
        # On uvloop, as `turnout serve` runs (asyncio's own socket transport keeps a reference
        # cycle of its own: a bound method of itself).
        policy = asyncio.get_event_loop_policy()
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        try:
            with run_router(config, sims=0, guarded=True) as running:
                asyncio.set_event_loop_policy(policy)
                yield running
        finally:
            asyncio.set_event_loop_policy(policy)


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with _router_on_uvloop() as running:
        yield running


@pytest.fixture(scope="module")
def failing_router() -> Iterator[Router]:
    """A router whose worker fails every stream after its 8th token."""
    with _router_on_uvloop("--fail-after-tokens", "8") as running:
        yield running


class _Garbage:
    """Collects with ``DEBUG_SAVEALL`` on: what a collection would free lands in
    ``gc.garbage``, where it can be counted."""

    def __enter__(self) -> _Garbage:
        gc.collect()
        gc.garbage.clear()
        gc.set_debug(gc.DEBUG_SAVEALL)
        self.found: list[Any] = []
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            gc.collect()
            self.found = list(gc.garbage)
        finally:
            gc.garbage.clear()
            gc.set_debug(0)

    def summary(self) -> dict[str, int]:
        return dict(collections.Counter(_label(obj) for obj in self.found).most_common(20))


def test_clients_leaving_mid_stream_leave_no_cyclic_garbage(router: Router) -> None:
    for sock in _open_streams(router, 2):  # warm: first-use objects (caches, pools)
        sock.close()
    _wait_no_requests(router)
    socks = _open_streams(router, K)
    with _Garbage() as garbage:
        for sock in socks:
            sock.close()
        _wait_no_requests(router)
    # Before the fix each connection left 24 objects (its protocols, the request's scope and
    # cycle) on a reference cycle through the connection guard.
    assert len(garbage.found) <= K // 4, garbage.summary()
    server = [obj for obj in garbage.found if _server_side(obj)]
    assert not server, garbage.summary()


def test_closed_keep_alive_connections_leave_no_cyclic_garbage(router: Router) -> None:
    socks = _open_streams(router, K, max_tokens=8)
    for sock in socks:  # the streams end; the connections stay open, idle
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            assert chunk
            data += chunk
    _wait_no_requests(router)
    with _Garbage() as garbage:
        for sock in socks:
            sock.close()
        router.wait_until(lambda: not _connections_open(), timeout=20)
        time.sleep(0.2)
    assert len(garbage.found) <= K // 4, garbage.summary()
    assert not [obj for obj in garbage.found if _server_side(obj)], garbage.summary()


def _connections_open() -> int:
    from turnout.server import connections

    return sum(pool.open for pool in list(connections._pools.values()))


def test_an_open_stream_keeps_few_server_side_objects_tracked(router: Router) -> None:
    for sock in _open_streams(router, 2):
        sock.close()
    _wait_no_requests(router)
    gc.collect()
    before = {id(obj) for obj in gc.get_objects()}
    socks = _open_streams(router, K)
    try:
        gc.collect()
        new = [obj for obj in gc.get_objects() if id(obj) not in before]
        new_ids = {id(obj) for obj in new}
        owned = [obj for obj in new if _server_side(obj)]
        held: dict[int, object] = {}
        for obj in owned:
            for ref in gc.get_referents(obj):
                if id(ref) in new_ids and _generic(ref) and not _server_side(ref):
                    held[id(ref)] = ref
        count = len(owned) + len(held)
        summary = collections.Counter(_label(obj) for obj in [*owned, *held.values()])
        del new, owned, held
        per_stream = count / K
        assert per_stream <= SERVER_BUDGET, (per_stream, summary.most_common(40))
    finally:
        for sock in socks:
            sock.close()
        _wait_no_requests(router)


def _read_to_the_end(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"0\r\n\r\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_streams_their_worker_fails_leave_no_cyclic_garbage(failing_router: Router) -> None:
    count = 4  # under the circuit breaker's threshold: every stream starts, then fails
    with _Garbage() as garbage:
        socks = _open_streams(failing_router, count)
        bodies = [_read_to_the_end(sock) for sock in socks]
        _wait_no_requests(failing_router)
        for sock in socks:
            sock.close()
    assert all(b'data: {"error"' in body for body in bodies), bodies
    # Before the fix the error event's frame kept the error, whose traceback held that frame:
    # each failed stream left about 60 of its request's objects on a cycle.
    assert len(garbage.found) <= count, garbage.summary()
