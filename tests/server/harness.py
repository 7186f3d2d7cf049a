"""Run the real router under uvicorn, with simulated SGLang workers, on loopback sockets."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from litestar import Litestar

from turnout.config import Config, build_config
from turnout.demo_model import path as demo_path
from turnout.server.app import create_app
from turnout.server.connections import ConnectionLimits, guarded_protocol
from turnout.sim import SimWorker
from turnout.testing.router import RunningRouter, free_port, serve_in_thread

MODEL = "turnout-demo"


def _role_entry(role: str) -> dict[str, Any]:
    """A worker's config keys for its role (none for a regular worker)."""
    return {} if role == "regular" else {"role": role}


#: The running router of turnout.testing (``sims``, ``base_url``, ``call``, ``wait_until``).
Router = RunningRouter


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
    engine: str = "sglang",
    engine_as_kind: bool = False,
) -> Iterator[Router]:
    """Start ``sims`` simulated workers and the router in a background thread (``model_dir``:
    the model the workers simulate and the router tokenizes for; the demo model by default).

    ``roles`` (one per sim, replacing ``sims``): a prefill-decode fleet, e.g. ``["prefill",
    "decode"]``; the config names each worker's role, and the router learns a prefill sim's
    bootstrap port (a free one) from its server info. ``guarded``: under the connection guard
    of ``turnout serve`` (its cap and deadlines from the config's ``server`` section).
    ``engine``: the protocol the sims serve and the router speaks to them (``vllm``,
    ``trtllm``: their URL schemes, or with ``engine_as_kind`` the workers' ``kind`` beside a
    plain ``grpc://`` URL)."""
    model_path = model_dir or demo_path()
    roles = list(roles) if roles is not None else ["regular"] * sims
    ports = [free_port() for _ in roles]
    data: dict[str, Any] = dict(config or {})
    data.setdefault("workers", [])
    worker_model = {} if discover_model else {"model": MODEL}
    scheme = "grpc" if engine == "sglang" or engine_as_kind else f"{engine}+grpc"
    if engine_as_kind:
        worker_model = {**worker_model, "kind": engine}
    data["workers"] = [
        *data["workers"],
        *(
            {"url": f"{scheme}://127.0.0.1:{p}", **worker_model, **_role_entry(role)}
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
                    engine=engine,  # type: ignore[arg-type]
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
    keep_alive = cfg.server.idle_timeout_s or 24 * 3600
    with serve_in_thread(app, http_port, timeout_keep_alive=keep_alive, **protocol) as loop:
        yield Router(workers, http_port, loop)
