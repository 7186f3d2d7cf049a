"""Run the router under uvicorn; ``--demo`` adds two in-process simulated workers."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
import uvicorn
from litestar import Litestar

from turnout.config import Config, ModelConfig, ServerConfig
from turnout.errors import ConfigError, StartupError
from turnout.observability.logs import configure_logging
from turnout.plugin_loader import Plugins
from turnout.server.app import create_app
from turnout.server.collector import settle_collector
from turnout.server.connections import ConnectionLimits, guarded_protocol
from turnout.server.context import ReloadAll, Services
from turnout.server.listener import bind_listener
from turnout.server.preflight import preflight
from turnout.server.shutdown import DrainingServer
from turnout.server.startup_failure import OneLineStartup
from turnout.workers.settings import WorkerSpec

DEMO_MODEL = "turnout-demo"
_NEVER_S = 10**9
log = logging.getLogger(__name__)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def demo_config(config: Config, ports: list[int]) -> Config:
    """The config plus simulated workers serving the demo model on ``ports``."""
    from turnout.demo_model import path as demo_path

    workers = [WorkerSpec(url=f"grpc://127.0.0.1:{port}", model=DEMO_MODEL) for port in ports]
    models = dict(config.models)
    models.setdefault(
        DEMO_MODEL,
        ModelConfig(tokenizer_path=str(demo_path()), tool_parser="qwen", reasoning_parser="qwen3"),
    )
    return msgspec.structs.replace(config, workers=[*config.workers, *workers], models=models)


def demo_workers(ports: list[int]):  # type: ignore[no-untyped-def]
    """A lifespan that runs simulated workers on ``ports`` while the app runs."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        from turnout.demo_model import path as demo_path
        from turnout.sim import SimWorker

        async with contextlib.AsyncExitStack() as stack:
            for port in ports:
                await stack.enter_async_context(
                    SimWorker(demo_path(), port=port, served_model_name=DEMO_MODEL)
                )
            yield

    return lifespan


def build(
    config: Config,
    *,
    demo: bool = False,
    source: Callable[[], Config] | None = None,
    reload_all: ReloadAll | None = None,
    on_started: Callable[[Services], None] | None = None,
    plugins: Plugins | None = None,
    address_known: bool = True,
) -> tuple[Config, Litestar]:
    """The effective config and the app (with demo workers when asked). ``source`` reloads the
    config (``POST /admin/reload``, SIGHUP); the demo has none. One of several serving
    processes reloads through its supervisor instead (``reload_all``) and is told
    ``on_started`` when its app is up. ``address_known`` is False when another server (uvicorn
    run by hand) chose where to listen: the ready line then names no address."""
    before = []
    if demo:
        ports = [_free_port(), _free_port()]
        config = demo_config(config, ports)
        before.append(demo_workers(ports))
    host, port = config.server.host, config.server.port

    async def announce(services: Services) -> None:
        settle_collector()
        if on_started is not None:
            on_started(services)
        models = sorted({w.model for w in config.workers if w.model} | set(config.models))
        log.info(
            "turnout ready%s — models: %s; workers: %s; plugins: %s",
            f" on http://{host}:{port}" if address_known else " (at the address uvicorn logged)",
            ", ".join(models) or "discovered from workers",
            workers_line(config),
            ", ".join(sorted({p.distribution for p in services.plugins.loaded})),
        )
        if demo:
            print(
                f"\ntry: curl http://{host}:{port}/v1/chat/completions "
                "-H 'content-type: application/json' "
                f'-d \'{{"model": "{DEMO_MODEL}", "messages": '
                '[{"role": "user", "content": "Hello, turnout!"}]}\'\n',
                flush=True,
            )

    return config, create_app(
        config,
        plugins=plugins,
        on_startup=announce,
        before=before,
        config_source=None if demo else source,
        reload_all=reload_all,
    )


CONFIG_ENV = "TURNOUT_CONFIG"


def app_from_env() -> Litestar:
    """An app built from the config file named by ``$TURNOUT_CONFIG`` (logging configured).

    For running several worker processes under uvicorn itself::

        TURNOUT_CONFIG=turnout.yaml PROMETHEUS_MULTIPROC_DIR=/tmp/turnout-metrics \\
            uvicorn --factory turnout.server.runner:app_from_env --workers 4 --port 8000
    """
    from turnout.config import load_config

    path = os.environ.get(CONFIG_ENV)
    config = load_config(path)
    configure_logging(config.server.log_level, config.server.log_json)
    return build(config, source=lambda: load_config(path), address_known=False)[1]


def workers_line(config: Config) -> str:
    """The workers the ready line names: the static ones, and where others come from."""
    static = [w.url for w in config.workers]
    providers = sorted({d.provider for d in config.discovery})
    if providers:
        static.append(f"discovered by {', '.join(providers)}")
    return ", ".join(static) or "none yet (add with POST /workers)"


def serve(config: Config, *, demo: bool = False, source: Callable[[], Config] | None = None) -> int:
    """Serve until SIGTERM/SIGINT, then drain (see :mod:`turnout.server.shutdown`); with
    ``server.processes`` above 1, under a supervisor (:mod:`turnout.server.supervisor`).
    Returns the exit status."""
    server = config.server
    configure_logging(server.log_level, server.log_json)
    if server.processes > 1 and demo:
        raise ConfigError(
            "--processes cannot be combined with --demo (each process would "
            "start its own simulated workers)"
        )
    # What `turnout check` builds: a config it passes starts (one line and exit 2 otherwise).
    plugins = preflight(config).plugins
    # Bind before the app starts: a taken port fails start-up with one line (exit 2), and the
    # "ready" line is only logged once clients can connect.
    listener = bind_listener(server.host, server.port)
    if server.port == 0:  # the OS chose: announce the real port
        server = msgspec.structs.replace(server, port=listener.getsockname()[1])
        config = msgspec.structs.replace(config, server=server)
    if server.processes > 1:
        from turnout.server.supervisor import serve_processes

        return serve_processes(config, source, listener)
    config, app = build(config, demo=demo, source=source, plugins=plugins)
    wrapped = OneLineStartup(app)
    running = DrainingServer(uvicorn.Config(wrapped, **uvicorn_settings(server)))
    try:
        running.run(sockets=[listener])
    except SystemExit:  # uvicorn's exit when the lifespan start-up failed
        if running.started:
            raise
        raise StartupError(wrapped.failure or "start-up failed") from None
    return 0


def uvicorn_settings(server: ServerConfig) -> dict[str, Any]:
    """uvicorn settings shared by the one-process and the several-process modes."""
    return {
        "host": server.host,
        "port": server.port,
        "log_level": server.log_level,
        "log_config": None,  # turnout configures logging itself
        "access_log": False,  # turnout writes its own access line
        "lifespan": "on",
        "timeout_graceful_shutdown": math.ceil(server.shutdown_grace_s),
        # Connection cap and deadlines (turnout.server.connections); uvicorn's own keep-alive
        # timer gets the same idle deadline.
        "http": guarded_protocol(ConnectionLimits.from_server(server)),
        "timeout_keep_alive": server.idle_timeout_s or _NEVER_S,
    }
