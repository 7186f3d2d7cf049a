"""Run the real router beside simulated SGLang workers (:class:`~turnout.sim.SimWorker`), over
real sockets, for a plugin's end-to-end tests::

    from turnout.testing.router import run_router

    def test_my_parser_in_a_chat():
        script = {"rules": [{"match": "weather", "reply": '>>>{"name": "f", "arguments": {}}<<<'}]}
        with run_router(model={"tool_parser": "arrow_calls"}, script=script) as router:
            status, body = router.request_json("POST", "/v1/chat/completions", {...})

The router serves the model :data:`MODEL` (the demo model shipped with turnout, which the sims
simulate) at ``router.base_url``; it loads the installed plugins (or ``plugins=``). The pytest
fixture ``turnout_router`` (:mod:`turnout.testing.pytest_plugin`) wraps this.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import uvicorn
from litestar import Litestar

from turnout.config import build_config
from turnout.demo_model import path as demo_path
from turnout.plugin_loader import Plugins
from turnout.server.app import create_app
from turnout.sim import SimWorker
from turnout.sim.model import Script

__all__ = ["MODEL", "RunningRouter", "free_port", "run_router", "serve_in_thread"]

#: The model id the sims serve and the router routes.
MODEL = "turnout-demo"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RunningRouter:
    """A running router; ``sims`` are the simulated workers behind it (on its event loop)."""

    def __init__(self, sims: list[SimWorker], port: int, loop: asyncio.AbstractEventLoop) -> None:
        self.sims = sims
        self.port = port
        self.loop = loop
        self.base_url = f"http://127.0.0.1:{port}"

    def call(self, fn: Callable[[], Coroutine[Any, Any, Any]], timeout_s: float = 30.0) -> Any:
        """Run ``fn`` (a coroutine function) on the router's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout_s)

    def wait_until(self, check: Callable[[], bool], timeout: float = 10.0) -> None:
        """Poll ``check`` until it holds; ``AssertionError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            time.sleep(0.02)

    def request_json(
        self, method: str, path: str, body: object = None, *, timeout_s: float = 30.0
    ) -> tuple[int, Any]:
        """Send ``body`` as JSON to ``path``; return the status and the decoded JSON answer."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"content-type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as error:
            with error:
                return error.code, json.loads(error.read() or b"null")


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readiness", timeout=1) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def serve_in_thread(
    app: Litestar, port: int, *, ready_timeout_s: float = 60.0, **uvicorn_options: Any
) -> Iterator[asyncio.AbstractEventLoop]:
    """Serve ``app`` with uvicorn on ``127.0.0.1:port`` in a thread of its own until the block
    ends; yields the server's event loop once ``/readiness`` answers 200."""
    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **uvicorn_options
        )
    )
    loop_box: list[asyncio.AbstractEventLoop] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        loop_box.append(loop)
        loop.run_until_complete(server.serve())
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + ready_timeout_s
    while not _ready(port):
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            thread.join(15)
            raise RuntimeError("router did not become ready")
        time.sleep(0.05)
    try:
        yield loop_box[0]
    finally:
        server.should_exit = True
        thread.join(15)


@contextlib.contextmanager
def run_router(
    config: Mapping[str, Any] | None = None,
    *,
    sims: int = 1,
    model: Mapping[str, Any] | None = None,
    script: Script | Mapping[str, Any] | Sequence[Mapping[str, Any]] | str | Path | None = None,
    plugins: Plugins | None = None,
    sim_options: Mapping[str, Any] | None = None,
) -> Iterator[RunningRouter]:
    """Start ``sims`` simulated workers of :data:`MODEL` and a router in front of them.

    ``config`` is the router's configuration (as in a config file; its ``workers`` get the
    sims added); ``model`` the options of :data:`MODEL` in it (``tool_parser``,
    ``reasoning_parser``, ``policy``, ...). ``script`` tells the sims what to answer (a script
    file, or its content: ``{"rules": [{"match": REGEX, "reply": TEXT}]}``); they echo
    otherwise. ``sim_options`` are more :class:`~turnout.sim.SimWorker` arguments (knobs such
    as ``delay_ms``). ``plugins`` replaces the installed plugins
    (``load_plugins(extra=[(module, "name", "0")])`` adds a module not installed).
    """
    if script is not None and not isinstance(script, Script | str | Path):
        script = Script.from_data(script)
    model_path = demo_path()
    ports = [free_port() for _ in range(sims)]
    data: dict[str, Any] = json.loads(json.dumps(dict(config or {})))
    data["workers"] = [
        *data.get("workers", []),
        *({"url": f"grpc://127.0.0.1:{port}", "model": MODEL} for port in ports),
    ]
    models = data.setdefault("models", {})
    models.setdefault(MODEL, {"tokenizer_path": str(model_path), **(model or {})})
    data.setdefault("health", {"interval_s": 0.5, "pending_interval_s": 0.1, "timeout_s": 2})
    workers: list[SimWorker] = []

    @contextlib.asynccontextmanager
    async def sims_beside(app: Litestar) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for port in ports:
                sim = SimWorker(
                    model_path,
                    port=port,
                    served_model_name=MODEL,
                    script=script,
                    **dict(sim_options or {}),
                )
                workers.append(await stack.enter_async_context(sim))
            yield

    app = create_app(build_config(data), plugins=plugins, before=[sims_beside])
    port = free_port()
    with serve_in_thread(app, port, timeout_keep_alive=75) as loop:
        router = RunningRouter(workers, port, loop)
        # Ready means one ready worker per model: wait for every sim (a policy test needs all).
        router.wait_until(lambda: _every_worker_ready(router), timeout=30)
        yield router


def _every_worker_ready(router: RunningRouter) -> bool:
    status, body = router.request_json("GET", "/readiness")
    return status == 200 and isinstance(body, dict) and "workers" not in body
