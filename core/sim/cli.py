"""``turnout sim``: run a simulated SGLang worker until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import grpc

from turnout import demo_model
from turnout.errors import StartupError
from turnout.server.listener import bind_listener
from turnout.sim.model import ScriptError
from turnout.sim.servicer import DEFAULT_KV_CACHE_TOKENS
from turnout.sim.worker import (
    BOOTSTRAP_PREFIX,
    DEFAULT_BOOTSTRAP_PORT,
    READY_PREFIX,
    TRANSPORTS,
    SimWorker,
)
from turnout.wire.engines import ENGINES

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``turnout sim`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="turnout sim",
        description=(
            "Run a simulated SGLang worker (gRPC, sglang.grpc.scheduler.SglangScheduler) with a "
            "deterministic echo or scripted model. Prints '"
            + READY_PREFIX
            + "grpc://HOST:PORT' once it accepts connections."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="sglang",
        help=(
            "the gRPC protocol served: SGLang's scheduler (default), vLLM's VllmEngine "
            "(vllm+grpc://) or TensorRT-LLM's TrtllmService (trtllm+grpc://); the same "
            "simulated model, knobs, cache and records behind each"
        ),
    )
    parser.add_argument("--port", type=int, default=30000, help="0 picks a free port")
    parser.add_argument(
        "--model-path",
        type=Path,
        default=None,
        help="model directory with tokenizer.json (default: turnout's demo model)",
    )
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument(
        "--reported-model-path",
        default=None,
        help="model path to report instead of the real one (a worker on another host)",
    )
    parser.add_argument("--script", type=Path, default=None, help="YAML/JSON reply rules")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="delay per token")
    parser.add_argument(
        "--delay-jitter-ms", type=float, default=0.0, help="up to this much more per token"
    )
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="extra delay before token 1")
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument(
        "--max-running", type=int, default=0, help="running requests per DP rank (0: unlimited)"
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=16,
        help="tokens per prefix-cache block (default %(default)s)",
    )
    parser.add_argument(
        "--kv-cache-tokens",
        type=int,
        default=DEFAULT_KV_CACHE_TOKENS,
        help=(
            "prefix-cache capacity per DP rank, tokens; unreferenced blocks are evicted least "
            "recently used first (default %(default)s; 0: no cache and no KV events)"
        ),
    )
    parser.add_argument(
        "--prefill-tokens-per-s",
        type=float,
        default=0.0,
        help=(
            "prefill speed: uncached prompt tokens per second, one prefill at a time per DP "
            "rank (default %(default)s: instant)"
        ),
    )
    parser.add_argument(
        "--kv-events-keep",
        type=int,
        default=10_000,
        help="KV event batches kept for resuming subscribers, all ranks (default %(default)s)",
    )
    parser.add_argument(
        "--dp-size",
        type=int,
        default=1,
        help="data-parallel ranks behind the endpoint, each with its own queue and load",
    )
    parser.add_argument(
        "--role",
        choices=["regular", "prefill", "decode"],
        default="regular",
        help="prefill or decode: one half of a prefill-decode pair (default %(default)s)",
    )
    parser.add_argument(
        "--bootstrap-port",
        type=int,
        default=DEFAULT_BOOTSTRAP_PORT,
        help="a prefill sim's rendezvous port for decode sims (default %(default)s; 0: free)",
    )
    parser.add_argument(
        "--bootstrap-timeout-s",
        type=float,
        default=300.0,
        help="how long either PD leg waits for the other (default %(default)s)",
    )
    parser.add_argument(
        "--lora-adapters",
        nargs="+",
        default=[],
        metavar="NAME[=PATH]",
        help="LoRA adapters loaded at start-up (each under a random lora_id)",
    )
    parser.add_argument(
        "--fail-status",
        default=None,
        help="fail every Generate and Embed with this gRPC status name",
    )
    parser.add_argument("--fail-after-tokens", type=int, default=None)
    parser.add_argument(
        "--context-answers",
        action="store_true",
        help="each next token follows from the last few of the context (failover checks)",
    )
    parser.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default="grpcio",
        help=(
            "gRPC server: grpcio (grpc.aio) or native (turnout's own HTTP/2 server on "
            "asyncio/uvloop, a fraction of the CPU per streamed message; default %(default)s)"
        ),
    )
    parser.add_argument("--hang", action="store_true", help="Generate and Embed never answer")
    parser.add_argument("--unhealthy", action="store_true", help="HealthCheck answers unhealthy")
    return parser


def _check(args: argparse.Namespace) -> str | None:
    if args.tokens_per_chunk < 1:
        return "--tokens-per-chunk must be >= 1"
    if args.delay_ms < 0 or args.ttft_ms < 0 or args.delay_jitter_ms < 0:
        return "--delay-ms, --delay-jitter-ms and --ttft-ms must be >= 0"
    if not 0 <= args.port <= 65535:
        return "--port must be in 0..65535"
    if not 0 <= args.bootstrap_port <= 65535:
        return "--bootstrap-port must be in 0..65535"
    if args.dp_size < 1:
        return "--dp-size must be >= 1"
    if args.engine != "sglang" and args.role != "regular":
        return f"--role {args.role} needs --engine sglang (PD pairs are SGLang's)"
    if args.block_size < 1:
        return "--block-size must be >= 1"
    if args.kv_cache_tokens < 0:
        return "--kv-cache-tokens must be >= 0"
    if args.prefill_tokens_per_s < 0:
        return "--prefill-tokens-per-s must be >= 0"
    if args.kv_events_keep < 1:
        return "--kv-events-keep must be >= 1"
    if args.max_running < 0:
        return "--max-running must be >= 0"
    if not args.bootstrap_timeout_s > 0:
        return "--bootstrap-timeout-s must be > 0"
    if args.fail_status is not None and args.fail_status not in grpc.StatusCode.__members__:
        names = ", ".join(grpc.StatusCode.__members__)
        return f"--fail-status must be one of {names}"
    return None


def _port_problem(host: str, port: int) -> str | None:
    """Why the sim cannot listen on ``host:port``, tried before gRPC does (which logs its own
    lines and gives no reason)."""
    if port == 0:
        return None
    try:
        bind_listener(host, port, setting="--port").close()
    except StartupError as exc:
        return str(exc)
    return None


async def _serve(args: argparse.Namespace) -> int:
    sim = SimWorker(
        args.model_path or demo_model.path(),
        host=args.host,
        port=args.port,
        script=args.script,
        served_model_name=args.served_model_name,
        reported_model_path=args.reported_model_path,
        delay_ms=args.delay_ms,
        delay_jitter_ms=args.delay_jitter_ms,
        ttft_ms=args.ttft_ms,
        tokens_per_chunk=args.tokens_per_chunk,
        max_running=args.max_running,
        prefill_tokens_per_s=args.prefill_tokens_per_s,
        block_size=args.block_size,
        kv_cache_tokens=args.kv_cache_tokens,
        kv_events_keep=args.kv_events_keep,
        fail_status=args.fail_status,
        fail_after_tokens=args.fail_after_tokens,
        context_answers=args.context_answers,
        hang=args.hang,
        unhealthy=args.unhealthy,
        dp_size=args.dp_size,
        role=args.role,
        bootstrap_port=args.bootstrap_port,
        bootstrap_timeout_s=args.bootstrap_timeout_s,
        lora_adapters=args.lora_adapters,
        transport=args.transport,
        engine=args.engine,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await sim.start()
    if sim.bootstrap_port is not None:
        print(f"{BOOTSTRAP_PREFIX}{args.host}:{sim.bootstrap_port}", flush=True)
    print(f"{READY_PREFIX}{sim.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await sim.stop(grace=1.0)
    return 0


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (the native transport runs on any loop)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``turnout sim`` / ``python -m turnout.sim``; returns the exit status."""
    args = build_parser().parse_args(argv)
    problem = _check(args) or _port_problem(args.host, args.port)
    if problem:
        print(f"turnout sim: error: {problem}", file=sys.stderr)
        return 2
    try:
        if args.transport == "native":
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                return runner.run(_serve(args))
        return asyncio.run(_serve(args))
    except (FileNotFoundError, ScriptError, OSError, ValueError) as exc:
        print(f"turnout sim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
