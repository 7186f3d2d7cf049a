"""Selection cost per request of every built-in policy, at 8 and 64 workers.

    .venv/bin/python bench/policies.py [--requests N] [--prompt-tokens T] [--tree-tokens M]

``cache_aware`` runs against a tree pre-filled with ``--tree-tokens`` tokens of other
conversations (default 8M tokens = 512k blocks), then serves multi-turn conversations whose
prefixes are in the tree. Prints microseconds per ``select`` call (median of 3 runs).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import turnout
from turnout.routing.types import Candidate, RoutingRequest


@dataclass(slots=True)
class Worker:
    id: str
    url: str
    load: int


def fleet(n: int, rnd: random.Random) -> list[Worker]:
    return [
        Worker(f"w{i}", f"grpc://10.0.{i // 250}.{i % 250}:30000", rnd.randrange(0, 20))
        for i in range(n)
    ]


def make_requests(count: int, tokens: int, rnd: random.Random) -> list[RoutingRequest]:
    conversations = [[rnd.randrange(1, 150_000) for _ in range(tokens)] for _ in range(64)]
    requests = []
    for i in range(count):
        conv = conversations[i % len(conversations)]
        tail = [rnd.randrange(1, 150_000) for _ in range(32)]
        requests.append(
            RoutingRequest(model="m", token_ids=tuple(conv + tail), routing_key=f"user-{i % 500}")
        )
    return requests


def prefill(
    policy: object, workers: Sequence[Candidate], tree_tokens: int, rnd: random.Random
) -> None:
    select = policy.select  # type: ignore[attr-defined]
    chunk = 2048
    for i in range(tree_tokens // chunk):
        tokens = tuple(rnd.randrange(1, 150_000) for _ in range(chunk))
        select(RoutingRequest(model="m", token_ids=tokens), workers)
        if i % 200 == 0:
            print(f"    prefill {i * chunk / 1e6:.1f}M tokens", end="\r", flush=True)
    print(" " * 40, end="\r")


def time_select(
    select: Callable[[RoutingRequest, Sequence[Candidate]], Candidate],
    requests: list[RoutingRequest],
    workers: list[Worker],
) -> float:
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        for req in requests:
            chosen = select(req, workers)
            chosen.load += 0  # touch the result like the dispatcher does
        runs.append((time.perf_counter() - start) / len(requests) * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--tree-tokens", type=int, default=8_000_000)
    args = parser.parse_args()
    registry = turnout.load_plugins().policies
    names = [
        "random",
        "round_robin",
        "power_of_two",
        "least_load",
        "prefix_hash",
        "consistent_hashing",
        "manual",
        "cache_aware",
    ]
    print(f"prompt {args.prompt_tokens} tokens, {args.requests} requests, median of 3 runs")
    print(f"{'policy':<20}{'8 workers':>14}{'64 workers':>14}")
    tree_note: list[str] = []
    for name in names:
        row = []
        for n in (8, 64):
            rnd = random.Random(1)
            workers = fleet(n, rnd)
            policy = registry.create(name)
            if hasattr(policy, "on_workers_changed"):
                policy.on_workers_changed([w.id for w in workers])
            if name == "cache_aware":
                before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                prefill(policy, workers, args.tree_tokens, rnd)
                after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                entries = len(policy.index)  # type: ignore[attr-defined]
                tree_note.append(f"{entries} blocks, max RSS +{(after - before) / 1024:.0f} MiB")
            requests = make_requests(args.requests, args.prompt_tokens, rnd)
            row.append(time_select(policy.select, requests, workers))
        label = name if name != "cache_aware" else "cache_aware*"
        print(f"{label:<20}{row[0]:>11.1f} us{row[1]:>11.1f} us")
    print(f"* tree pre-filled with {args.tree_tokens / 1e6:.1f}M tokens ({'; '.join(tree_note)})")
    print()
    print("registry.candidates() per request (health, circuit and model filter):")
    for n in (8, 64):
        print(f"  {n:>2} workers: {candidates_cost(n, args.requests):.1f} us")


def candidates_cost(n: int, count: int) -> float:
    """Cost of the dispatcher's per-request candidate filter over ``n`` ready workers."""
    from turnout.workers.registry import WorkerRegistry
    from turnout.workers.settings import WorkerSpec

    registry = WorkerRegistry(connect=lambda url: None)  # type: ignore[arg-type,return-value]
    for i in range(n):
        spec = WorkerSpec(url=f"grpc://10.1.0.{i}:30000", model="m")
        worker = asyncio.run(registry.add(spec))
        worker.health.mark_healthy()
    start = time.perf_counter()
    for _ in range(count):
        registry.candidates("m")
    return (time.perf_counter() - start) / count * 1e6


if __name__ == "__main__":
    main()
