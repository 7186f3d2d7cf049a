"""The load generator: a separate process driving one target at fixed concurrency.

``python -m bench.loadgen --target http://127.0.0.1:8000 --scenario chat --concurrency 32
--duration 20 --out result.json`` (or ``--target direct:grpc://h:p,grpc://h:p`` to talk to the
workers themselves). Closed loop: ``concurrency`` tasks each send their next request as soon
as the previous one finished (task ``k`` starts ``ramp * k / concurrency`` seconds late). After
``--warmup`` seconds it prints ``{"event": "window_start"}`` on stdout, after ``--duration``
more ``{"event": "window_end"}`` (the parent samples the router's CPU at those two lines), then
writes the summary of the requests that *finished inside the window* to ``--out``.

Several processes can drive one target together (``--sync``): each prints ``{"event":
"ready"}`` once set up and waits for one JSON line on stdin, ``{"start": T0, "end": T1}`` in
``time.perf_counter`` seconds (CLOCK_MONOTONIC, one clock for every process of the machine).
It starts its tasks at once and its window is [T0, T1]. ``--task-offset`` and
``--total-concurrency`` give the tasks of all processes distinct prompt indices and one ramp.
``--out`` also holds this process's raw records, and ``<out>.itl`` its inter-token gaps
(float64 pairs: arrival time, gap), so that the parent can merge the processes exactly
(``bench.analysis``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from bench.analysis import Record, summarize, write_gaps
from bench.httpclient import HttpConnection, HttpError
from bench.scenarios import DEFAULT_SCENARIOS, SCENARIOS, max_tokens_for
from bench.workload import (
    ConversationPool,
    GapLog,
    Outcome,
    PromptPool,
    make_body,
    make_conversation_body,
    read_json_answer,
    read_sse_answer,
)

__all__ = ["main", "run_load"]

Sender = Callable[[int, str], Awaitable[Outcome]]


def emit(event: str, **fields: Any) -> None:
    """One JSON line on stdout for the parent process."""
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


def _http_sender(
    target: str,
    scenarios: list[str],
    pool: PromptPool,
    model: str,
    max_tokens: int,
    *,
    gaps: GapLog,
) -> Callable[[], Sender]:
    parts = urlsplit(target)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    bodies = {
        name: [
            make_body(
                name, model, pool.text(i), max_tokens_for(name, i, max_tokens), pool.system(i)
            )
            for i in range(len(pool))
        ]
        for name in scenarios
    }

    def new_sender() -> Sender:
        conn = HttpConnection(host, port)

        async def send(i: int, name: str) -> Outcome:
            scenario = SCENARIOS[name]
            parsed = scenario.env == "parsers"
            body = bodies[name][i % len(pool)]
            try:
                response = await conn.request("POST", scenario.path, body)
                if scenario.streaming and response.status == 200:
                    return await read_sse_answer(response.iter_body(), gaps=gaps, parsed=parsed)
                return read_json_answer(
                    response.status,
                    await response.read(),
                    parsed=parsed,
                    tagged=scenario.env == "routing",
                )
            except HttpError as exc:
                return Outcome(error=str(exc))

        return send

    return new_sender


def _conversation_sender(
    target: str, pool: ConversationPool, model: str, max_tokens: int, *, gaps: GapLog
) -> Callable[[], Sender]:
    """Streamed chats of ``pool``'s conversations (bodies built per request: they grow).
    ``target`` may list several router replicas (comma separated): the clients are dealt to
    them in turn, each keeping its connection (and so its conversations) on one."""
    addresses = [urlsplit(url) for url in target.split(",")]
    dealt = itertools.count()

    def new_sender() -> Sender:
        parts = addresses[next(dealt) % len(addresses)]
        conn = HttpConnection(parts.hostname or "127.0.0.1", parts.port or 80)

        async def send(i: int, name: str) -> Outcome:
            body = make_conversation_body(model, pool.messages(i), max_tokens)
            try:
                response = await conn.request("POST", SCENARIOS[name].path, body)
                if response.status == 200:
                    return await read_sse_answer(response.iter_body(), gaps=gaps)
                return read_json_answer(response.status, await response.read())
            except HttpError as exc:
                return Outcome(error=str(exc))

        return send

    return new_sender


def _direct_sender(
    urls: list[str], pool: PromptPool, max_tokens: int, gaps: GapLog, offset: int
) -> Callable[[], Sender]:
    from turnout.wire import WorkerClient
    from turnout.wire.errors import WorkerCallError
    from turnout.wire.sampling import build_generate_request, build_sampling_params

    clients = [WorkerClient(url) for url in urls]
    # like make_body: pinned lengths, but the parser scenarios' scripted answers end with EOS
    params: dict[tuple[bool, int], Any] = {}

    def params_for(name: str, i: int) -> Any:
        key = (SCENARIOS[name].env != "parsers", max_tokens_for(name, i, max_tokens))
        if key not in params:
            params[key] = build_sampling_params(
                max_new_tokens=key[1], ignore_eos=key[0], temperature=0
            )
        return params[key]

    counter = itertools.count(offset)  # processes spread their first requests over the workers

    def new_sender() -> Sender:
        async def send(i: int, name: str) -> Outcome:
            n = next(counter)
            client = clients[n % len(clients)]
            request = build_generate_request(
                request_id=f"bench-{uuid.uuid4().hex}",
                input_ids=pool.ids(i),
                sampling_params=params_for(name, i),
                stream=SCENARIOS[name].streaming,
            )
            outcome = Outcome()
            last: float | None = None
            try:
                async with client.generate(request) as stream:
                    async for response in stream:
                        outcome.events += 1
                        if response.HasField("chunk"):
                            if response.chunk.token_ids:
                                now = time.perf_counter()
                                if outcome.first_token_at is None:
                                    outcome.first_token_at = now
                                elif last is not None:
                                    gaps.add(now, now - last)
                                last = now
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


async def _sleep_until(moment: float) -> None:
    left = moment - time.perf_counter()
    if left > 0:
        await asyncio.sleep(left)


async def run_load(
    new_sender: Callable[[], Sender],
    scenarios: list[str],
    *,
    concurrency: int,
    window: tuple[float, float],
    request_timeout: float,
    progress_every: float = 0.0,
    ramp: float = 0.0,
    offset: int = 0,
    total: int | None = None,
    group_of: Callable[[int], int | None] = lambda i: None,
    think_s: float = 0.0,
) -> list[Record]:
    """Drive the target until ``window`` (perf_counter start, end) is over; returns the records.

    Task ``k`` of this process is task ``offset + k`` of ``total`` (all processes): it sends
    prompts ``offset + k + n * total`` and starts ``ramp * (offset + k) / total`` seconds late.
    With ``think_s``, a task pauses a random 0 to ``think_s`` seconds (fixed per prompt index)
    before each request, outside its latency, so the tasks do not stay in lock step.
    """
    total = total or concurrency
    window_start, window_end = window
    began = time.perf_counter()
    records: list[Record] = []
    stop = False
    mixed = len(scenarios) > 1

    async def loop(k: int) -> None:
        task = offset + k
        if ramp > 0:
            await _sleep_until(began + ramp * task / total)
        send = new_sender()
        for n in itertools.count():
            if stop:
                return
            i = task + n * total  # distinct prompts across tasks
            scenario = scenarios[i % len(scenarios)] if mixed else scenarios[0]
            if think_s > 0:
                await asyncio.sleep(think_s * random.Random(i).random())
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
                    group_of(i),
                    outcome.worker,
                )
            )

    tasks = [asyncio.create_task(loop(k)) for k in range(concurrency)]
    try:
        await _sleep_until(window_start)
        emit("window_start")
        while (left := window_end - time.perf_counter()) > 0:
            await asyncio.sleep(min(progress_every, left) if progress_every > 0 else left)
            if progress_every > 0 and time.perf_counter() < window_end:
                done = [r for r in records if r.end >= window_start]
                emit(
                    "progress",
                    requests=len(done),
                    errors=sum(1 for r in done if r.error),
                    elapsed=round(time.perf_counter() - window_start, 3),
                )
        emit("window_end")
    finally:
        stop = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return records


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
    parser.add_argument("--ramp", type=float, default=0.0, help="seconds over which tasks start")
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--groups", type=int, default=0, help="prompt groups sharing a prefix")
    parser.add_argument("--conversations", type=int, default=0, help="kv_cache: conversations")
    parser.add_argument("--turns", type=int, default=8, help="kv_cache: turns per conversation")
    parser.add_argument("--system-tokens", type=int, default=512, help="kv_cache: system prompt")
    parser.add_argument("--turn-tokens", type=int, default=48, help="kv_cache: a user message")
    parser.add_argument(
        "--think-ms", type=float, default=0.0, help="random pause before each request, up to"
    )
    parser.add_argument("--model", default="turnout-demo")
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--progress-every", type=float, default=0.0, help="seconds; 0: quiet")
    parser.add_argument("--sync", action="store_true", help="wait for the window on stdin")
    parser.add_argument("--task-offset", type=int, default=0)
    parser.add_argument("--total-concurrency", type=int, default=0, help="0: --concurrency")
    parser.add_argument("--out", required=True, help="write the JSON summary here")
    return parser


def _read_window(args: argparse.Namespace) -> tuple[float, float]:
    if not args.sync:
        start = time.perf_counter() + args.warmup
        return start, start + args.duration
    line = sys.stdin.readline()
    order = json.loads(line) if line.strip() else {}
    return float(order["start"]), float(order["end"])


async def _amain(args: argparse.Namespace) -> dict[str, Any]:
    scenarios = list(DEFAULT_SCENARIOS) if args.scenario == "mix" else [args.scenario]
    gaps = GapLog()
    conversations: ConversationPool | None = None
    if args.conversations:
        conversations = ConversationPool(
            args.conversations,
            groups=args.groups,
            turns=args.turns,
            system_tokens=args.system_tokens,
            turn_tokens=args.turn_tokens,
        )
    pool = PromptPool(
        args.prompt_tokens,
        size=1 if conversations else 256,
        groups=0 if conversations else args.groups,
    )
    if conversations is not None:
        new_sender = _conversation_sender(
            args.target, conversations, args.model, args.max_tokens, gaps=gaps
        )
    elif args.target.startswith("direct:"):
        urls = args.target[len("direct:") :].split(",")
        new_sender = _direct_sender(urls, pool, args.max_tokens, gaps, args.task_offset)
    else:
        new_sender = _http_sender(
            args.target, scenarios, pool, args.model, args.max_tokens, gaps=gaps
        )
    emit("ready", pid=os.getpid())
    window = await asyncio.get_running_loop().run_in_executor(None, _read_window, args)
    records = await run_load(
        new_sender,
        scenarios,
        concurrency=args.concurrency,
        window=window,
        request_timeout=args.request_timeout,
        progress_every=args.progress_every,
        ramp=args.ramp,
        offset=args.task_offset,
        total=args.total_concurrency or args.concurrency,
        group_of=conversations.group if conversations else pool.group,
        think_s=args.think_ms / 1000,
    )
    write_gaps(args.out + ".itl", gaps)
    summary = summarize(records, *window, gaps=gaps)
    summary["prompt_tokens"] = len(pool.ids(0))
    return {
        "summary": summary,
        "window": list(window),
        "records": [record.as_row() for record in records],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the load generator; exit 2 on bad arguments."""
    args = build_parser().parse_args(argv)
    if args.scenario != "mix" and args.scenario not in SCENARIOS:
        print(f"loadgen: unknown scenario {args.scenario!r}", file=sys.stderr)
        return 2
    if (
        args.concurrency < 1
        or args.duration <= 0
        or args.warmup < 0
        or args.ramp < 0
        or args.think_ms < 0
    ):
        print(
            "loadgen: need --concurrency >= 1, --duration > 0, --warmup >= 0, --ramp >= 0, "
            "--think-ms >= 0",
            file=sys.stderr,
        )
        return 2
    if args.target.startswith("direct:"):
        # grpc.aio runs its own poller and is markedly slower under uvloop: plain asyncio here
        result = asyncio.run(_amain(args))
    else:
        try:
            import uvloop
        except ImportError:
            result = asyncio.run(_amain(args))
        else:
            result = uvloop.run(_amain(args))
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    emit("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
