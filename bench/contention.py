"""The ``contention`` scenario (opt-in): a bulk tenant saturating the workers with long prompts
while an interactive tenant sends a trickle of short streamed chats.

For each target (turnout without admission classes, with them, and with them and a held share
for ``interactive``; smg without and with its priority scheduler) three phases run on the same
simulated workers: the trickle alone (its idle TTFT; at the same rate, but long enough for
``--contention-idle-samples`` requests, so that its p99 is not one outlier), the bulk load
alone (its uncontended throughput), and both at once. Reported: the interactive TTFT p50/p99
and the bulk throughput of each phase, and the ratios the issue sets targets for (contended
p99 over idle p99, contended bulk throughput over uncontended); and from the workers' own
counters, how busy their running slots were and how many calls the router cancelled
(preemptions), to tell an idle engine from a slow one.

The load runs in this process (asyncio and httpx): a few dozen streams, far below what would
make the driver the bottleneck.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.services import MODEL, Router, find_smg, start_sims, start_smg, start_turnout
from turnout.sim import get_counters

#: Class headers of both routers (each ignores the other's).
INTERACTIVE = {"x-turnout-priority": "interactive", "x-smg-priority": "interactive"}
BULK = {"x-turnout-priority": "bulk", "x-smg-priority": "bulk"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scenario's flags."""
    group = parser.add_argument_group("contention (opt-in)")
    group.add_argument("--contention-phase-s", type=float, default=10.0, help="seconds a phase")
    group.add_argument("--contention-bulk-clients", type=int, default=24, help="bulk streams")
    group.add_argument(
        "--contention-bulk-prompt-tokens", type=int, default=1500, help="bulk prompt, ~tokens"
    )
    group.add_argument("--contention-bulk-max-tokens", type=int, default=64)
    group.add_argument(
        "--contention-interactive-rps", type=float, default=2.0, help="interactive trickle"
    )
    group.add_argument(
        "--contention-idle-samples",
        type=int,
        default=120,
        help="interactive requests of the idle phase, at the same rate (it lasts longer)",
    )
    group.add_argument(
        "--contention-hold", type=float, default=0.125, help="interactive hold of turnout-hold"
    )
    group.add_argument("--contention-max-running", type=int, default=4, help="per sim")
    group.add_argument("--contention-delay-ms", type=float, default=8.0, help="per token")
    group.add_argument(
        "--contention-prefill-tokens-per-s", type=float, default=30000.0, help="sims' prefill"
    )


def sim_flags(args: argparse.Namespace) -> list[str]:
    """The sims of the scenario: a running limit, paced decode, a prefill cost."""
    return [
        "--max-running",
        str(args.contention_max_running),
        "--delay-ms",
        f"{args.contention_delay_ms:g}",
        "--prefill-tokens-per-s",
        f"{args.contention_prefill_tokens_per_s:g}",
    ]


@dataclass
class Phase:
    """What one phase measured."""

    ttfts: list[float] = field(default_factory=list)
    interactive_errors: int = 0
    bulk_done: int = 0
    bulk_tokens: int = 0
    bulk_errors: int = 0
    seconds: float = 0.0
    #: ``time.monotonic()`` of the phase's start, and the first bulk and interactive sends
    #: (seconds after it; None: none).
    started: float = 0.0
    first_bulk_s: float | None = None
    first_interactive_s: float | None = None
    #: The workers' counters (``get_counters``) at the start and the end of the phase.
    engines_before: list[dict[str, Any]] = field(default_factory=list)
    engines_after: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        ttfts = sorted(self.ttfts)
        return {
            "interactive_requests": len(ttfts),
            "interactive_errors": self.interactive_errors,
            "ttft_p50_ms": _pct(ttfts, 0.50),
            "ttft_p99_ms": _pct(ttfts, 0.99),
            "bulk_requests_per_s": round(self.bulk_done / self.seconds, 2)
            if self.seconds
            else None,
            "bulk_tokens_per_s": round(self.bulk_tokens / self.seconds, 1)
            if self.seconds
            else None,
            "bulk_errors": self.bulk_errors,
            **self._engines(),
        }

    def _engines(self) -> dict[str, Any]:
        """How busy the workers' running slots were (the share of slot-seconds in use), the
        calls cancelled on them and the prompt tokens they prefilled (not cached)."""
        if not self.engines_before or not self.engines_after or not self.seconds:
            return {}

        def total(key: str, counters: list[dict[str, Any]]) -> float:
            return sum(rank.get(key, 0) for c in counters for rank in c["ranks"])

        def delta(key: str) -> float:
            return total(key, self.engines_after) - total(key, self.engines_before)

        return {
            "engine_slot_seconds": round(delta("busy_slot_s"), 2),
            "engine_calls": int(delta("requests")),
            "engine_cancelled": int(delta("cancelled")),
            "engine_prefill_tokens": int(delta("prompt_tokens") - delta("cached_tokens")),
        }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    index = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return round(values[index] * 1000, 1)


async def _interactive(
    http: httpx.AsyncClient, url: str, phase: Phase, until: float, rps: float
) -> None:
    async def one(n: int) -> None:
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": f"quick question {n}: what time is it"}],
            "max_tokens": 16,
            "stream": True,
        }
        sent = time.monotonic()
        if phase.first_interactive_s is None:
            phase.first_interactive_s = sent - phase.started
        try:
            async with http.stream(
                "POST", f"{url}/v1/chat/completions", json=body, headers=INTERACTIVE
            ) as response:
                if response.status_code != 200:
                    await response.aread()
                    phase.interactive_errors += 1
                    return
                first: float | None = None
                async for line in response.aiter_lines():
                    if first is None and line.startswith("data: ") and '"content"' in line:
                        first = time.monotonic() - sent
                if first is not None:
                    phase.ttfts.append(first)
        except httpx.HTTPError:
            phase.interactive_errors += 1

    tasks = []
    rng = random.Random(7)
    n = 0
    while time.monotonic() < until:
        tasks.append(asyncio.create_task(one(n)))
        n += 1
        await asyncio.sleep(rng.expovariate(rps))
    await asyncio.gather(*tasks)


async def _bulk(
    http: httpx.AsyncClient,
    url: str,
    phase: Phase,
    until: float,
    args: argparse.Namespace,
) -> None:
    words = args.contention_bulk_prompt_tokens
    tag = next(_PHASES)

    async def client(c: int) -> None:
        n = 0
        while time.monotonic() < until:
            n += 1
            # A different start per request (and phase: the workers outlive a phase, and
            # each target's): no prefix-cache hits between them.
            items = " ".join(f"item{(i * 7 + c) % 97}" for i in range(words))
            text = f"batch {tag} {c} {n} {items}"
            body = {
                "model": MODEL,
                "messages": [{"role": "user", "content": text}],
                "max_tokens": args.contention_bulk_max_tokens,
            }
            if phase.first_bulk_s is None:
                phase.first_bulk_s = time.monotonic() - phase.started
            try:
                response = await http.post(f"{url}/v1/chat/completions", json=body, headers=BULK)
            except httpx.HTTPError:
                phase.bulk_errors += 1
                continue
            if response.status_code != 200:
                phase.bulk_errors += 1
                await asyncio.sleep(0.05)
                continue
            if time.monotonic() <= until:
                phase.bulk_done += 1
                phase.bulk_tokens += response.json()["usage"]["completion_tokens"]

    await asyncio.gather(*(client(c) for c in range(args.contention_bulk_clients)))


#: Numbers the bulk phases of a run (their prompts differ).
_PHASES = itertools.count()


async def _phase(
    url: str, sims: list[str], args: argparse.Namespace, *, interactive: bool, bulk: bool
) -> Phase:
    phase = Phase()
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    seconds = args.contention_phase_s
    if interactive and not bulk:  # the same rate, enough samples for a p99
        seconds = max(seconds, args.contention_idle_samples / args.contention_interactive_rps)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        phase.engines_before = await _counters(sims)
        start = phase.started = time.monotonic()
        until = start + seconds
        # The workers' counters as the window closes (requests then in flight still finish).
        closing = asyncio.create_task(_counters(sims, at=until))
        jobs: list[asyncio.Task[None]] = []
        try:
            if bulk:  # a task: it runs from now on, as the phase's throughput assumes
                jobs.append(asyncio.create_task(_bulk(http, url, phase, until, args)))
                if interactive:  # the bulk load fills the workers before the trickle starts
                    await asyncio.sleep(min(2.0, args.contention_phase_s / 4))
            if interactive:
                rps = args.contention_interactive_rps
                jobs.append(asyncio.create_task(_interactive(http, url, phase, until, rps)))
            await asyncio.gather(*jobs)
            phase.engines_after = await closing
        finally:
            for task in (*jobs, closing):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        phase.seconds = until - start
    return phase


async def _counters(sims: list[str], at: float | None = None) -> list[dict[str, Any]]:
    """The workers' counters (``get_counters``), at ``time.monotonic()`` ``at`` (None: now)."""
    if at is not None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
    return list(await asyncio.gather(*(get_counters(url) for url in sims)))


def _targets(args: argparse.Namespace, names: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(target, kind, options) of the routers compared."""
    capacity = args.workers * args.contention_max_running
    targets: list[tuple[str, str, dict[str, Any]]] = []
    if "turnout" in names:
        targets.append(("turnout", "turnout", {}))
        targets.append(("turnout-classes", "turnout", {"config": {"admission": {"enabled": True}}}))
        held = {"enabled": True, "classes": _classes_holding(args.contention_hold)}
        targets.append(("turnout-hold", "turnout", {"config": {"admission": held}}))
    if "smg" in names and find_smg() is not None:
        targets.append(("smg", "smg", {}))
        flags = [
            "--priority-scheduler-enabled",
            "--priority-scheduler-default-max-class",
            "interactive",
            "--max-concurrent-requests",
            str(capacity),
            "--queue-size",
            "1000",
        ]
        targets.append(("smg-classes", "smg", {"extra": flags}))
    return targets


def _classes_holding(hold: float) -> list[dict[str, Any]]:
    """turnout's default classes, ``interactive`` holding ``hold`` of capacity."""
    return [
        {"name": "system", "share": 0.1, "queue_size": 100, "queue_timeout_s": 60},
        {
            "name": "interactive",
            "share": 0.4,
            "hold": hold,
            "queue_size": 200,
            "queue_timeout_s": 30,
        },
        {"name": "default", "share": 0.2, "queue_size": 200, "queue_timeout_s": 60},
        {
            "name": "bulk",
            "share": 0.1,
            "queue_size": 1000,
            "queue_timeout_s": 300,
            "preempt": False,
        },
    ]


def _start(
    kind: str, options: dict[str, Any], urls: list[str], log_dir: Path, args: argparse.Namespace
) -> Router:
    if kind == "turnout":
        return start_turnout(
            urls,
            log_dir,
            policy=args.policy,
            name="contention-turnout",
            config=options.get("config"),
        )
    command = find_smg()
    assert command is not None
    return start_smg(
        urls,
        log_dir,
        policy=args.policy,
        command=command,
        extra=options.get("extra", ()),
        name="contention-smg",
    )


def run(args: argparse.Namespace, names: list[str], log_dir: Path) -> dict[str, Any]:
    """Every target through the three phases; the figures by target and phase."""
    results: dict[str, Any] = {}
    with start_sims(args.workers, args_for=lambda _i: sim_flags(args)) as sims:
        urls = [sim.url for sim in sims]
        for target, kind, options in _targets(args, names):
            router = _start(kind, options, urls, log_dir, args)
            print(f"contention: {target} {router.version} ready at {router.url}", flush=True)
            try:
                figures: dict[str, Any] = {}
                for phase_name, interactive, bulk in (
                    ("idle", True, False),
                    ("bulk_alone", False, True),
                    ("contended", True, True),
                ):
                    phase = asyncio.run(
                        _phase(router.url, urls, args, interactive=interactive, bulk=bulk)
                    )
                    figures[phase_name] = summary = phase.summary()
                    slot_seconds = summary.get("engine_slot_seconds")
                    if slot_seconds is not None and phase.seconds:
                        slots = args.workers * args.contention_max_running
                        summary["engine_busy"] = round(slot_seconds / (phase.seconds * slots), 3)
                    print(f"  {phase_name}: {json.dumps(figures[phase_name])}", flush=True)
                    time.sleep(1.0)  # the workers drain
                figures["verdict"] = _verdict(figures)
                results[target] = figures
            finally:
                router.stop()
    return {"contention": results}


def _verdict(figures: dict[str, Any]) -> dict[str, Any]:
    idle = figures["idle"]["ttft_p99_ms"]
    contended = figures["contended"]["ttft_p99_ms"]
    alone = figures["bulk_alone"]["bulk_tokens_per_s"]
    shared = figures["contended"]["bulk_tokens_per_s"]
    return {
        "p99_contended_over_idle": round(contended / idle, 2) if idle and contended else None,
        "bulk_contended_over_alone": round(shared / alone, 3) if alone and shared else None,
    }


def render(result: dict[str, Any]) -> str:
    """The scenario's table."""
    head = ("target", "idle p50", "idle p99", "cont p50", "cont p99", "bulk alone", "bulk cont")
    head += ("p99 x idle", "bulk kept", "busy alone", "busy cont", "cancelled")
    rows = [head]
    for target, figures in result.items():
        idle, contended, alone = figures["idle"], figures["contended"], figures["bulk_alone"]
        verdict = figures["verdict"]
        values = (
            idle["ttft_p50_ms"],
            idle["ttft_p99_ms"],
            contended["ttft_p50_ms"],
            contended["ttft_p99_ms"],
            alone["bulk_tokens_per_s"],
            contended["bulk_tokens_per_s"],
            verdict["p99_contended_over_idle"],
            verdict["bulk_contended_over_alone"],
            alone.get("engine_busy"),
            contended.get("engine_busy"),
            contended.get("engine_cancelled"),
        )
        rows.append((target, *(_fmt(v) for v in values)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "contention: interactive TTFT (ms), bulk completion tokens/s, share of the workers'"
        " running slot-seconds in use, worker calls cancelled by the router (contended)"
    ]
    lines += ["  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
