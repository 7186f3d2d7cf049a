"""Run the real router under uvicorn, with simulated SGLang workers, on loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from litestar import Litestar

from turnout.config import Config, build_config
from turnout.demo_model import path as demo_path
from turnout.server.app import create_app
from turnout.server.connections import ConnectionLimits, guarded_protocol
from turnout.sim import SimWorker

MODEL = "turnout-demo"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _role_entry(role: str) -> dict[str, Any]:
    """A worker's config keys for its role (none for a regular worker)."""
    return {} if role == "regular" else {"role": role}


class Router:
    """A running router; ``sims`` are the simulated workers behind it (same event loop)."""

    def __init__(self, sims: list[SimWorker], port: int, loop: asyncio.AbstractEventLoop) -> None:
        self.sims = sims
        self.port = port
        self.loop = loop
        self.base_url = f"http://127.0.0.1:{port}"

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (a coroutine factory) on the router's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(30)

    def wait_until(self, check: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            time.sleep(0.02)


@contextlib.contextmanager
def run_router(
    config: dict[str, Any] | None = None,
    *,
    sims: int = 2,
    sim_kwargs: dict[str, Any] | None = None,
    model: dict[str, Any] | None = None,
    reload_data: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    discover_model: bool = False,
    model_dir: Path | None = None,
    roles: Sequence[str] | None = None,
    guarded: bool = False,
) -> Iterator[Router]:
    """Start ``sims`` simulated workers and the router in a background thread (``model_dir``:
    the model the workers simulate and the router tokenizes for; the demo model by default).

    ``roles`` (one per sim, replacing ``sims``): a prefill-decode fleet, e.g. ``["prefill",
    "decode"]``; the config names each worker's role, and the router learns a prefill sim's
    bootstrap port (a free one) from its server info. ``guarded``: under the connection guard
    of ``turnout serve`` (its cap and deadlines from the config's ``server`` section)."""
    model_path = model_dir or demo_path()
    roles = list(roles) if roles is not None else ["regular"] * sims
    ports = [free_port() for _ in roles]
    data: dict[str, Any] = dict(config or {})
    data.setdefault("workers", [])
    worker_model = {} if discover_model else {"model": MODEL}
    data["workers"] = [
        *data["workers"],
        *(
            {"url": f"grpc://127.0.0.1:{p}", **worker_model, **_role_entry(role)}
            for p, role in zip(ports, roles, strict=True)
        ),
    ]
    if discover_model:  # the model id comes from the workers, the tokenizer from the defaults
        data.setdefault("defaults", {})["tokenizer_path"] = str(model_path)
    else:
        models = data.setdefault("models", {})
        models.setdefault(MODEL, {"tokenizer_path": str(model_path), **(model or {})})
    data.setdefault("health", {"interval_s": 0.5, "pending_interval_s": 0.1, "timeout_s": 2})
    cfg = build_config(data)
    http_port = free_port()
    workers: list[SimWorker] = []

    @contextlib.asynccontextmanager
    async def sim_lifespan(app: Litestar) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for port, role in zip(ports, roles, strict=True):
                sim = SimWorker(
                    model_path,
                    port=port,
                    served_model_name=MODEL,
                    role=role,  # type: ignore[arg-type]
                    bootstrap_port=0,
                    **(sim_kwargs or {}),
                )
                workers.append(await stack.enter_async_context(sim))
            yield

    source = None
    if reload_data is not None:
        edit = reload_data

        def source() -> Config:
            return build_config(edit(copy.deepcopy(data)))

    app = create_app(cfg, before=[sim_lifespan], config_source=source)
    protocol = (
        {"http": guarded_protocol(ConnectionLimits.from_server(cfg.server))} if guarded else {}
    )
    # Keep-alive as `turnout serve` has it (server.idle_timeout_s, 75 s), not uvicorn's 5 s: a
    # server that drops idle connections exactly when httpx's pool expires them (also 5 s)
    # races a client reusing one, and the client's request meets a reset.
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=http_port,
            log_level="warning",
            lifespan="on",
            timeout_keep_alive=cfg.server.idle_timeout_s or 24 * 3600,
            **protocol,
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
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{http_port}/readiness", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            server.should_exit = True
            raise RuntimeError("router did not become ready")
        time.sleep(0.05)
    try:
        yield Router(workers, http_port, loop_box[0])
    finally:
        server.should_exit = True
        thread.join(15)
