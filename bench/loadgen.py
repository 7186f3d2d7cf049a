"""The load generator: a separate process driving one target at fixed concurrency.

``python -m bench.loadgen --target http://127.0.0.1:8000 --scenario chat --concurrency 32
--duration 20 --out result.json`` (or ``--target direct:grpc://h:p,grpc://h:p`` to talk to the
workers themselves). Closed loop: ``concurrency`` tasks each send their next request as soon
as the previous one finished. After ``--warmup`` seconds it prints ``{"event":
"window_start"}`` on stdout, after ``--duration`` more ``{"event": "window_end"}`` (the
parent samples the router's CPU at those two lines), then writes the summary of the requests
that *finished inside the window* to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from bench.httpclient import HttpConnection, HttpError
from bench.stats import summarize_ms
from bench.workload import (
    DEFAULT_SCENARIOS,
    SCENARIOS,
    STREAMING,
    Outcome,
    PromptPool,
    make_body,
    path_for,
    read_json_answer,
    read_sse_answer,
)

__all__ = ["Record", "main", "run_load", "summarize"]

MAX_ERROR_SAMPLES = 5
Sender = Callable[[int, str], Awaitable[Outcome]]


@dataclass(slots=True)
class Record:
    """One finished request (times from ``time.perf_counter``)."""

    scenario: str
    start: float
    end: float
    first: float | None
    tokens: int
    error: str | None
    events: int = 0


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout for the parent process."""
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def _http_sender(
    target: str, scenarios: list[str], pool: PromptPool, model: str, max_tokens: int
) -> Callable[[], Sender]:
    parts = urlsplit(target)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    bodies = {
        name: [make_body(name, model, pool.text(i), max_tokens) for i in range(len(pool))]
        for name in scenarios
    }

    def new_sender() -> Sender:
        conn = HttpConnection(host, port)

        async def send(i: int, scenario: str) -> Outcome:
            body = bodies[scenario][i % len(pool)]
            try:
                response = await conn.request("POST", path_for(scenario), body)
                if scenario in STREAMING and response.status == 200:
                    return await read_sse_answer(response.iter_body())
                return read_json_answer(response.status, await response.read())
            except HttpError as exc:
                return Outcome(error=str(exc))

        return send

    return new_sender


def _direct_sender(urls: list[str], pool: PromptPool, max_tokens: int) -> Callable[[], Sender]:
    from turnout.wire import WorkerClient
    from turnout.wire.errors import WorkerCallError
    from turnout.wire.sampling import build_generate_request, build_sampling_params

    clients = [WorkerClient(url) for url in urls]
    params = build_sampling_params(max_new_tokens=max_tokens, ignore_eos=True, temperature=0)
    counter = itertools.count()

    def new_sender() -> Sender:
        async def send(i: int, scenario: str) -> Outcome:
            n = next(counter)
            client = clients[n % len(clients)]
            request = build_generate_request(
                request_id=f"bench-{uuid.uuid4().hex}",
                input_ids=pool.ids(i),
                sampling_params=params,
                stream=scenario in STREAMING,
            )
            outcome = Outcome()
            try:
                async with client.generate(request) as stream:
                    async for response in stream:
                        outcome.events += 1
                        if response.HasField("chunk"):
                            if outcome.first_token_at is None and response.chunk.token_ids:
                                outcome.first_token_at = time.perf_counter()
                        elif response.HasField("complete"):
                            done = response.complete
                            outcome.tokens += done.completion_tokens or len(done.output_ids)
                            if outcome.first_token_at is None:
                                outcome.first_token_at = time.perf_counter()
            except WorkerCallError as exc:
                return Outcome(error=str(exc))
            return outcome

        return send

    return new_sender


async def run_load(
    new_sender: Callable[[], Sender],
    scenarios: list[str],
    *,
    concurrency: int,
    warmup: float,
    duration: float,
    request_timeout: float,
    progress_every: float = 0.0,
) -> tuple[list[Record], float, float]:
    """Drive the target; returns the records and the window's (start, end)."""
    records: list[Record] = []
    stop = False
    mixed = len(scenarios) > 1

    async def loop(k: int) -> None:
        send = new_sender()
        for n in itertools.count():
            if stop:
                return
            i = k + n * concurrency  # distinct prompts across tasks
            scenario = scenarios[i % len(scenarios)] if mixed else scenarios[0]
            start = time.perf_counter()
            try:
                async with asyncio.timeout(request_timeout):
                    outcome = await send(i, scenario)
            except TimeoutError:
                outcome = Outcome(error=f"no answer within {request_timeout:g}s")
            records.append(
                Record(
                    scenario,
                    start,
                    time.perf_counter(),
                    outcome.first_token_at,
                    outcome.tokens,
                    outcome.error,
                    outcome.events,
                )
            )

    tasks = [asyncio.create_task(loop(k)) for k in range(concurrency)]
    try:
        await asyncio.sleep(warmup)
        window_start = time.perf_counter()
        emit("window_start")
        if progress_every > 0:
            end_at = window_start + duration
            while (left := end_at - time.perf_counter()) > 0:
                await asyncio.sleep(min(progress_every, left))
                done = [r for r in records if r.end >= window_start]
                emit(
                    "progress",
                    requests=len(done),
                    errors=sum(1 for r in done if r.error),
                    elapsed=round(time.perf_counter() - window_start, 3),
                )
        else:
            await asyncio.sleep(duration)
        window_end = time.perf_counter()
        emit("window_end")
    finally:
        stop = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return records, window_start, window_end


def summarize(records: list[Record], window_start: float, window_end: float) -> dict[str, Any]:
    """Throughput, latency and TTFT of the requests that finished inside the window."""
    inside = [r for r in records if window_start <= r.end <= window_end]
    good = [r for r in inside if r.error is None]
    errors = [r for r in inside if r.error is not None]
    seconds = window_end - window_start
    tokens = sum(r.tokens for r in good)
    samples: list[str] = []
    for r in errors:
        if r.error not in samples:
            samples.append(r.error or "")
        if len(samples) >= MAX_ERROR_SAMPLES:
            break
    return {
        "window_s": round(seconds, 3),
        "requests": len(good),
        "errors": len(errors),
        "error_samples": samples,
        "output_tokens": tokens,
        "tokens_per_request": round(tokens / len(good), 2) if good else None,
        "events_per_request": round(sum(r.events for r in good) / len(good), 2) if good else None,
        "requests_per_s": round(len(good) / seconds, 3) if seconds > 0 else None,
        "output_tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None,
        "latency_ms": summarize_ms([r.end - r.start for r in good]),
        "ttft_ms": summarize_ms([r.first - r.start for r in good if r.first is not None]),
    }


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the load generator."""
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__)
    parser.add_argument(
        "--target", required=True, help="http://host:port or direct:grpc://h:p[,grpc://h:p…]"
    )
    parser.add_argument(
        "--scenario",
        default="chat",
        help=f"one of {', '.join(SCENARIOS)}, or 'mix' ({'/'.join(DEFAULT_SCENARIOS)} in turn)",
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds first")
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--model", default="turnout-demo")
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--progress-every", type=float, default=0.0, help="seconds; 0: quiet")
    parser.add_argument("--out", required=True, help="write the JSON summary here")
    return parser


async def _amain(args: argparse.Namespace) -> dict[str, Any]:
    scenarios = list(DEFAULT_SCENARIOS) if args.scenario == "mix" else [args.scenario]
    pool = PromptPool(args.prompt_tokens)
    if args.target.startswith("direct:"):
        new_sender = _direct_sender(args.target[len("direct:") :].split(","), pool, args.max_tokens)
    else:
        new_sender = _http_sender(args.target, scenarios, pool, args.model, args.max_tokens)
    emit("ready", pid=os.getpid())
    records, start, end = await run_load(
        new_sender,
        scenarios,
        concurrency=args.concurrency,
        warmup=args.warmup,
        duration=args.duration,
        request_timeout=args.request_timeout,
        progress_every=args.progress_every,
    )
    summary = summarize(records, start, end)
    summary["prompt_tokens"] = len(pool.ids(0))
    return summary


def main(argv: list[str] | None = None) -> int:
    """Run the load generator; exit 2 on bad arguments."""
    args = build_parser().parse_args(argv)
    if args.scenario != "mix" and args.scenario not in SCENARIOS:
        print(f"loadgen: unknown scenario {args.scenario!r}", file=sys.stderr)
        return 2
    if args.concurrency < 1 or args.duration <= 0 or args.warmup < 0:
        print("loadgen: need --concurrency >= 1, --duration > 0, --warmup >= 0", file=sys.stderr)
        return 2
    if args.target.startswith("direct:"):
        # grpc.aio runs its own poller and is markedly slower under uvloop: plain asyncio here
        summary = asyncio.run(_amain(args))
    else:
        try:
            import uvloop
        except ImportError:
            summary = asyncio.run(_amain(args))
        else:
            summary = uvloop.run(_amain(args))
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(summary, handle, indent=2)
    emit("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
