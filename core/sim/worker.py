"""Run a simulated SGLang worker: in-process (``SimWorker``) or as a subprocess (``SimProcess``).

Besides ``SglangScheduler``, the server offers a small JSON control service
(``turnout.sim.Control``: ``SetKnobs``, ``GetRecords``, ``GetCounters``) so that a test or benchmark
can change the knobs of a simulator running in another process (``set_knobs`` / ``get_records`` /
``get_counters``).
"""

from __future__ import annotations

import asyncio
import json
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

import grpc
import grpc.aio

from turnout import demo_model
from turnout.sim.disagg import BootstrapServer
from turnout.sim.knobs import SimKnobs
from turnout.sim.lora import SimAdapters
from turnout.sim.model import ModelFiles, Script, SimModel
from turnout.sim.native_server import NativeServer
from turnout.sim.records import SimRecords
from turnout.sim.servicer import DEFAULT_KV_CACHE_TOKENS, Role, SimServicer
from turnout.sim.trtllm_servicer import TrtllmSimServicer
from turnout.sim.vllm_servicer import VllmSimServicer
from turnout.testing.processes import GroupProcess
from turnout.wire.engines import ENGINES, EngineName
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.wire.proto import sglang_scheduler_pb2_grpc as pb_grpc
from turnout.wire.proto import trtllm_service_pb2_grpc as tpb_grpc
from turnout.wire.proto import vllm_engine_pb2_grpc as vpb_grpc

__all__ = [
    "SimProcess",
    "SimWorker",
    "get_counters",
    "get_records",
    "refuse_connections",
    "set_knobs",
]

#: gRPC server implementations: ``grpcio`` (grpc.aio) or ``native`` (turnout.sim.native_server,
#: far less CPU per streamed message).
Transport = Literal["grpcio", "native"]
TRANSPORTS: Final = ("grpcio", "native")

CONTROL_SERVICE: Final = "turnout.sim.Control"
READY_PREFIX: Final = "turnout-sim listening on "
#: Printed before the ready line by a prefill sim: its bootstrap ``host:port``.
BOOTSTRAP_PREFIX: Final = "turnout-sim bootstrap on "
#: SGLang's default ``--disaggregation-bootstrap-port``.
DEFAULT_BOOTSTRAP_PORT: Final = 8998

SERVER_OPTIONS: Final = [
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    # A taken port must be an error, not a silently shared listener.
    ("grpc.so_reuseport", 0),
]


class SimWorker:
    """A simulated SGLang worker serving ``SglangScheduler`` over real gRPC on ``host:port``.

    ``async with SimWorker(port=0) as sim:`` starts it (``port=0`` picks a free port; see
    ``sim.url``). Knob keyword arguments (``delay_ms=…``) set ``sim.knobs``, which can be changed
    at any time. ``sim.records`` keeps what it received. ``stop_serving()`` / ``resume_serving()``
    make it refuse connections and come back on the same port.

    ``lora_adapters`` (``NAME`` or ``NAME=PATH``) are loaded at start-up, each under a random
    ``lora_id`` (``sim.servicer.adapters``), as SGLang's ``--lora-paths``.

    ``dp_size`` ranks share the endpoint (SGLang's DP attention). ``role="prefill"`` also listens
    on ``bootstrap_port`` (0: a free one, see ``sim.bootstrap_port``) for decode sims
    (``role="decode"``) to meet it; see :mod:`turnout.sim.disagg`.

    Each rank has a block prefix cache of ``kv_cache_tokens`` (0: none) in blocks of
    ``block_size`` tokens, whose stores and evictions it streams as KV events (the newest
    ``kv_events_keep`` batches can be resumed); see :mod:`turnout.sim.kv_cache`.

    ``transport="native"`` serves the same RPCs with :mod:`turnout.sim.native_server` instead
    of ``grpc.aio`` (a fraction of the CPU per streamed message).
    """

    def __init__(
        self,
        model_dir: str | Path | None = None,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        script: Script | str | Path | None = None,
        served_model_name: str | None = None,
        knobs: SimKnobs | None = None,
        dp_size: int = 1,
        role: Role = "regular",
        bootstrap_port: int = DEFAULT_BOOTSTRAP_PORT,
        lora_adapters: Sequence[str] = (),
        transport: Transport = "grpcio",
        block_size: int = 16,
        kv_cache_tokens: int = DEFAULT_KV_CACHE_TOKENS,
        kv_events_keep: int = 10_000,
        engine: EngineName = "sglang",
        **knob_values: Any,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if engine != "sglang" and role != "regular":
            raise ValueError(f"a {engine} sim serves whole requests only (role regular)")
        #: The protocol served: SGLang's scheduler, vLLM's engine or TensorRT-LLM's service.
        self.engine: EngineName = engine
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        files = ModelFiles.load(model_dir or demo_model.path(), served_model_name)
        if script is not None and not isinstance(script, Script):
            script = Script.load(script)
        knobs = knobs or SimKnobs()
        knobs.update(knob_values)
        self.bootstrap = (
            BootstrapServer(host, bootstrap_port, lambda: knobs.bootstrap_timeout_s)
            if role == "prefill"
            else None
        )
        self.servicer = SimServicer(
            SimModel(files, script),
            knobs,
            dp_size=dp_size,
            role=role,
            bootstrap=self.bootstrap,
            adapters=SimAdapters(lora_adapters),
            block_size=block_size,
            kv_cache_tokens=kv_cache_tokens,
            kv_events_keep=kv_events_keep,
        )
        self.host = host
        self.port = port
        self.transport: Transport = transport
        self._server: grpc.aio.Server | NativeServer | None = None
        self._outage: asyncio.Task[None] | None = None

    @property
    def knobs(self) -> SimKnobs:
        """The live knobs (read per request and per chunk)."""
        return self.servicer.knobs

    @property
    def records(self) -> SimRecords:
        """Everything received so far."""
        return self.servicer.records

    @property
    def requests(self) -> list[pb.GenerateRequest]:
        """GenerateRequests received, in order."""
        return self.servicer.records.requests

    @property
    def aborted(self) -> list[str]:
        """Request ids named by Abort calls, in order."""
        return self.servicer.records.aborted

    @property
    def constraints(self) -> list[tuple[str, str]]:
        """(kind, value) of every constraint received."""
        return self.servicer.records.constraints

    @property
    def running(self) -> int:
        """Generate calls in progress right now."""
        return len(self.servicer._running)

    @property
    def rank_stats(self) -> list[dict[str, float]]:
        """Per DP rank: requests, generated tokens, peak queue, seconds spent queueing."""
        return [rank.stats.as_dict() for rank in self.servicer.ranks]

    @property
    def bootstrap_port(self) -> int | None:
        """A prefill sim's bootstrap port (bound once started); None for other roles."""
        return None if self.bootstrap is None else self.bootstrap.port

    @property
    def url(self) -> str:
        """``grpc://host:port`` of the running server (``vllm+grpc://`` or ``trtllm+grpc://``
        for those engines)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        scheme = "grpc" if self.engine == "sglang" else f"{self.engine}+grpc"
        return f"{scheme}://{host}:{self.port}"

    @property
    def serving(self) -> bool:
        """True while the server accepts connections."""
        return self._server is not None

    async def start(self) -> Self:
        """Bind and start serving (a second call does nothing)."""
        if self._server is not None:
            return self
        if self.bootstrap is not None:
            await self.bootstrap.start()
        if self.transport == "native":
            await self._start_native()
            return self
        server = grpc.aio.server(options=SERVER_OPTIONS)
        _add_servicer(self.engine, self.servicer, server)
        server.add_generic_rpc_handlers((_control_handler(self),))
        try:
            port = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as exc:
            port = 0
            problem = f": {exc}"
        else:
            problem = ""
        if port == 0:
            if self.bootstrap is not None:
                await self.bootstrap.stop()
            raise OSError(f"cannot listen on {self.host}:{self.port}{problem}")
        self.port = port
        await server.start()
        self._server = server
        return self

    async def _start_native(self) -> None:
        server = NativeServer()
        _add_servicer(self.engine, self.servicer, server)
        server.add_generic_rpc_handlers((_control_handler(self),))
        try:
            self.port = await server.start(self.host, self.port)
        except OSError as exc:
            if self.bootstrap is not None:
                await self.bootstrap.stop()
            raise OSError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self._server = server

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving; in-flight calls are cancelled after ``grace`` seconds."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
        if self.bootstrap is not None:
            await self.bootstrap.stop()

    async def stop_serving(self) -> None:
        """Fault: drop every connection and refuse new ones (state and records are kept)."""
        await self.stop(None)

    async def resume_serving(self, attempts: int = 50) -> None:
        """Serve again on the same port (retrying briefly while the OS releases it)."""
        for _ in range(attempts):
            try:
                await self.start()
                return
            except OSError:
                await asyncio.sleep(0.05)
        await self.start()

    async def _refuse_for(self, seconds: float) -> None:
        await asyncio.sleep(0.05)  # let the RefuseFor answer leave first
        await self.stop_serving()
        await asyncio.sleep(seconds)
        await self.resume_serving()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop(None)


def _add_servicer(engine: EngineName, sim: SimServicer, server: Any) -> None:
    """Serve ``sim`` on ``server`` in ``engine``'s protocol."""
    if engine == "vllm":
        vpb_grpc.add_VllmEngineServicer_to_server(VllmSimServicer(sim), server)  # type: ignore[no-untyped-call]
    elif engine == "trtllm":
        tpb_grpc.add_TrtllmServiceServicer_to_server(TrtllmSimServicer(sim), server)  # type: ignore[no-untyped-call]
    else:
        pb_grpc.add_SglangSchedulerServicer_to_server(sim, server)  # type: ignore[no-untyped-call]


# -- control service (JSON over a generic gRPC method) ------------------------------------------


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value).encode()


def _json_value(data: bytes) -> Any:
    return json.loads(data.decode() or "null")


def _control_handler(worker: SimWorker) -> grpc.GenericRpcHandler[Any, Any]:
    async def set_knobs_rpc(changes: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if not isinstance(changes, dict):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "send a JSON object of knobs")
        try:
            worker.knobs.update(changes)
        except ValueError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return worker.knobs.as_dict()

    async def refuse_for_rpc(seconds: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if not isinstance(seconds, int | float) or seconds <= 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "send a positive number")
        worker._outage = asyncio.get_running_loop().create_task(worker._refuse_for(seconds))
        return {"refusing_for_s": seconds}

    async def get_records_rpc(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        records = worker.records
        return {
            "requests": [r.request_id for r in records.requests],
            "aborted": list(records.aborted),
            "constraints": [list(c) for c in records.constraints],
            "outcomes": dict(records.outcomes),
            "generated": dict(records.generated),
            "health_checks": records.health_checks,
            "running": worker.running,
            "role": worker.servicer.role,
            "dp_size": worker.servicer.dp_size,
            "ranks": dict(records.ranks),
            "rank_stats": worker.rank_stats,
            "embeds": [r.request_id for r in records.embed_requests],
            "multimodal": [m.as_dict() for m in records.multimodal],
            "metadata": dict(records.metadata),
            "lora_ids": dict(records.lora_ids),
            "lora_adapters": {a.name: a.lora_id for a in worker.servicer.adapters.by_name.values()},
            "cache_flushes": worker.servicer.cache_flushes,
            "profiling": worker.servicer.profiling is not None,
            "kv_subscriptions": list(records.kv_subscriptions),
        }

    async def get_counters_rpc(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        servicer = worker.servicer
        return {
            "tokens_out": sum(rank.tokens_out for rank in servicer.ranks),
            "requests": len(servicer.records.requests),
            "running": worker.running,
            "ranks": worker.rank_stats,
        }

    def handler(fn: Any) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=_json_value, response_serializer=_json_bytes
        )

    return grpc.method_handlers_generic_handler(
        CONTROL_SERVICE,
        {
            "SetKnobs": handler(set_knobs_rpc),
            "GetRecords": handler(get_records_rpc),
            "GetCounters": handler(get_counters_rpc),
            "RefuseFor": handler(refuse_for_rpc),
        },
    )


async def _control_call(url: str, method: str, payload: Any, timeout_s: float) -> Any:
    from turnout.wire.client import parse_worker_url

    target, _ = parse_worker_url(url)
    # A subchannel of its own: gRPC shares them between channels to one target, with their
    # reconnect back-off, so a call right after the sim served again would fail at once.
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        call = channel.unary_unary(
            f"/{CONTROL_SERVICE}/{method}",
            request_serializer=_json_bytes,
            response_deserializer=_json_value,
        )
        return await call(payload, timeout=timeout_s)


async def set_knobs(url: str, timeout_s: float = 5.0, **changes: Any) -> dict[str, Any]:
    """Change knobs of the simulator at ``url`` (any process); returns all knob values."""
    result: dict[str, Any] = await _control_call(url, "SetKnobs", changes, timeout_s)
    return result


async def refuse_connections(url: str, seconds: float, timeout_s: float = 5.0) -> None:
    """Make the simulator at ``url`` drop connections and refuse new ones for ``seconds``."""
    await _control_call(url, "RefuseFor", seconds, timeout_s)


async def get_records(url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Summary of what the simulator at ``url`` received (request ids, aborts, outcomes…)."""
    result: dict[str, Any] = await _control_call(url, "GetRecords", None, timeout_s)
    return result


async def get_counters(url: str, timeout_s: float = 5.0) -> dict[str, int]:
    """Cheap running totals of the simulator at ``url``: tokens generated, requests received,
    requests generating now (a benchmark reads them at the edges of its window)."""
    result: dict[str, int] = await _control_call(url, "GetCounters", None, timeout_s)
    return result


# -- subprocess ---------------------------------------------------------------------------------


class SimProcess:
    """``python -m turnout.sim`` in a child process on a free port.

    ``with SimProcess("--delay-ms", "5") as sim: …sim.url…`` (or ``async with``). Extra
    arguments are those of ``turnout sim``; ``--port`` and ``--bootstrap-port`` default to 0
    (free ports; a prefill sim's is ``sim.bootstrap_port``).
    """

    def __init__(
        self, *args: str, python: str = sys.executable, startup_timeout: float = 30.0
    ) -> None:
        self.args = list(args)
        for flag in ("--port", "--bootstrap-port"):
            if flag not in self.args:
                self.args += [flag, "0"]
        self.python = python
        self.startup_timeout = startup_timeout
        self.group: GroupProcess | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0
        #: A prefill sim's bootstrap port (0 for other roles).
        self.bootstrap_port = 0

    def start(self) -> Self:
        """Start the child and wait for its "listening" line; ``RuntimeError`` if it fails."""
        # Its own process group and TMPDIR: stop() leaves no process and no file behind.
        self.group = GroupProcess(
            [self.python, "-m", "turnout.sim", *self.args],
            stdout=subprocess.PIPE,
            # Unbuffered: a line left in a read buffer would never wake the selector.
            bufsize=0,
            env={"PYTHONUNBUFFERED": "1"},
        )
        self.proc = self.group.proc
        assert self.proc.stdout is not None
        deadline_at = time.monotonic() + self.startup_timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline_at - time.monotonic()
                if left <= 0 or not selector.select(left):
                    self.stop()
                    raise RuntimeError(f"simulator did not start within {self.startup_timeout}s")
                line = self.proc.stdout.readline().decode(errors="replace")
                if not line:
                    code = self.stop()
                    raise RuntimeError(f"simulator exited with status {code} before listening")
                if line.startswith(BOOTSTRAP_PREFIX):
                    self.bootstrap_port = int(line.rsplit(":", 1)[1])
                if line.startswith(READY_PREFIX):
                    self.url = line[len(READY_PREFIX) :].strip()
                    match = re.search(r":(\d+)$", self.url)
                    self.port = int(match.group(1)) if match else 0
                    return self

    def stop(self, timeout: float = 10.0) -> int | None:
        """Terminate its process group (SIGTERM, then SIGKILL after ``timeout``) and remove its
        temporary files; returns the exit status."""
        group, self.group, self.proc = self.group, None, None
        if group is None:
            return None
        return group.stop(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)
