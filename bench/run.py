"""Benchmark turnout against SGLang's Rust router (smg) and against the workers themselves.

    python bench/run.py --duration 20 --concurrency 32        # compare (default)
    python bench/run.py --scenarios paced_stream,parse_chat,parse_chat_stream,processes
    python bench/run.py --scenarios kv_cache                  # prefix-cache hit rate, TTFT
    python bench/run.py --scenarios contention                # priority classes under load
    python bench/run.py --profile --duration 15               # where turnout's CPU goes
    python bench/run.py --soak --soak-duration 600            # RSS over time at concurrency 64

Simulated workers serve every scenario (zero delay, or paced like a GPU, or scripted); each
router (turnout, and smg when the ``smg`` command is installed) is put in front of the same
workers, and separate load-generator processes drive each target with the same workload. The
router's CPU is read from ``/proc`` (its whole process tree) at the start and end of each
measured window. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import importlib.util
import json
import os
import platform
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import contention, procfs  # noqa: E402
from bench.analysis import (  # noqa: E402
    Record,
    added_delay,
    affinity,
    cache_use,
    memory_per_stream,
    rank_balance,
    rank_use,
    read_gaps,
    slope_per_minute,
    split_concurrency,
    summarize,
)
from bench.cpus import CpuPlan, parse_cpus, pin_tree, plan_cpus  # noqa: E402
from bench.otlp_sink import SpanSink  # noqa: E402
from bench.profiling import find_py_spy, parse_collapsed, start_py_spy  # noqa: E402
from bench.report import (  # noqa: E402
    render_profile,
    render_results,
    render_soak,
)
from bench.rounds import fold, round_order  # noqa: E402
from bench.scenarios import (  # noqa: E402
    DEFAULT_SCENARIOS,
    PD_ROLES,
    SCENARIOS,
    TRACED,
    LoadPlan,
    RouterSpec,
    by_env,
    load_plan,
    parse_delay_range,
    router_specs,
    sim_args,
)
from bench.services import (  # noqa: E402
    MODEL,
    Router,
    StartError,
    find_smg,
    start_sims,
    start_smg,
    start_turnout,
)

SCHEMA = "turnout-bench/1"
ROUTERS = ("turnout", "smg")
#: Warm-up of the rounds after the first (at most ``--warmup``): the routers are warm by then,
#: only the new load generator's connections are not.
LATER_ROUND_WARMUP = 1.0
#: Seconds the load generators get to set up (tokenize their prompts) before the window is set.
LOADGEN_SETUP_TIMEOUT = 120.0

OnEvent = Callable[[dict[str, Any], list[int]], None]


class BenchError(RuntimeError):
    """The benchmark could not run (a service did not start, the load generator failed)."""


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _int_csv(value: str) -> list[int]:
    try:
        return [int(part) for part in _csv(value)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"want a comma list of integers, got {value!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """Flags of ``bench/run.py`` (documented in docs/benchmarks.md)."""
    parser = argparse.ArgumentParser(
        prog="python bench/run.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--profile", action="store_true", help="profile turnout with py-spy")
    mode.add_argument("--soak", action="store_true", help="long run; report RSS over time")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--scenarios",
        type=_csv,
        default=list(DEFAULT_SCENARIOS),
        help=f"comma list of {', '.join(SCENARIOS)} (default %(default)s)",
    )
    parser.add_argument(
        "--routers",
        type=_csv,
        default=None,
        help="comma list of turnout, smg (default: both, smg only when installed; soak: turnout)",
    )
    parser.add_argument("--no-direct", action="store_true", help="skip the direct baseline")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure every scenario's targets this many times, interleaved (routers stay up); "
        "ratios and verdicts use the median over the rounds",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="also run turnout with tracing on (every request traced, spans exported over "
        "OTLP/gRPC to a sink in the bench process): target turnout-traced",
    )
    parser.add_argument("--workers", type=int, default=2, help="simulated workers")
    parser.add_argument(
        "--engine",
        choices=("sglang", "vllm", "trtllm"),
        default="sglang",
        help="the protocol the simulated workers serve (turnout sim --engine); smg finds it "
        "itself, turnout by the URL scheme, direct through turnout's client",
    )
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="worker stream interval")
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--policy", default="round_robin", help="policy for both routers")
    parser.add_argument(
        "--turnout-processes", type=int, default=1, help="serving processes of turnout"
    )
    parser.add_argument(
        "--router-cpus",
        type=_cpu_list,
        default=None,
        metavar="CPUS",
        help="pin the routers to these CPUs (e.g. 1, or 2-3) and the workers, load generators "
        "and harness to the others, so that the delay a router adds is not CPU it shares",
    )
    parser.add_argument(
        "--loadgen-processes",
        type=int,
        default=0,
        help="load-generator processes per run (0: one per 250 streams)",
    )
    paced = parser.add_argument_group("paced_stream")
    paced.add_argument("--paced-streams", type=int, default=1000, help="open streams")
    paced.add_argument(
        "--paced-delay-ms", default="20-40", help="per-token delay range of the workers"
    )
    paced.add_argument("--paced-max-tokens", type=int, default=256, help="answer length")
    routing = parser.add_argument_group("processes")
    routing.add_argument(
        "--process-counts", type=_int_csv, default=[1, 2], help="turnout serving processes"
    )
    routing.add_argument("--routing-policy", default="cache_aware", help="policy of both routers")
    routing.add_argument(
        "--prefix-groups", type=int, default=32, help="prompt groups sharing a system prompt"
    )
    dp = parser.add_argument_group("dp_ranks")
    dp.add_argument("--dp-size", type=int, default=4, help="data-parallel ranks per worker")
    dp.add_argument("--dp-delay-ms", type=float, default=2.0, help="the workers' delay per token")
    dp.add_argument("--dp-max-running", type=int, default=4, help="running requests per rank")
    dp.add_argument("--dp-policy", default="least_load", help="policy of both turnout runs")
    kv = parser.add_argument_group("kv_cache (opt-in)")
    kv.add_argument("--kv-cache-tokens", type=int, default=24000, help="prefix cache per sim")
    kv.add_argument("--kv-block-size", type=int, default=16, help="tokens per cache block")
    kv.add_argument(
        "--kv-prefill-tokens-per-s", type=float, default=8000.0, help="sims' prefill speed"
    )
    kv.add_argument("--kv-delay-ms", type=float, default=0.0, help="sims' delay per token")
    kv.add_argument("--kv-max-tokens", type=int, default=16, help="answer length")
    kv.add_argument("--kv-groups", type=int, default=8, help="system prompts shared")
    kv.add_argument(
        "--kv-conversations",
        type=int,
        default=64,
        help="conversations (a multiple of --concurrency: each client keeps its own)",
    )
    kv.add_argument(
        "--kv-replicas", type=int, default=2, help="turnout cache_aware replicas (<= 1: none)"
    )
    kv.add_argument(
        "--kv-think-ms",
        type=float,
        default=100.0,
        help="clients pause a random 0 to MS before each turn (breaks their lock step)",
    )
    kv.add_argument(
        "--kv-targets",
        type=_csv,
        default=None,
        help="comma list of the kv_cache targets to run (default: all; e.g. "
        "turnout-cache,turnout-cache-p2,turnout-cache-x2)",
    )
    kv.add_argument("--kv-turns", type=int, default=8, help="turns before a conversation ends")
    kv.add_argument("--kv-system-tokens", type=int, default=512, help="system prompt, ~tokens")
    kv.add_argument("--kv-turn-tokens", type=int, default=48, help="a user message, ~tokens")
    contention.add_arguments(parser)
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--profile-top", type=int, default=15, help="hot spots to print")
    parser.add_argument("--profile-rate", type=int, default=200, help="py-spy samples/s")
    parser.add_argument("--soak-duration", type=float, default=600.0)
    parser.add_argument("--soak-concurrency", type=int, default=64)
    parser.add_argument("--soak-interval", type=float, default=10.0, help="RSS sample period")
    parser.add_argument("--out", type=Path, default=None, help="JSON result file")
    parser.add_argument("--log-dir", type=Path, default=None, help="router logs (default tmp)")
    # Set while a --tracing run's span sink is up.
    parser.set_defaults(tracing_endpoint=None)
    return parser


def _check_args(args: argparse.Namespace) -> str | None:
    if "contention" in args.scenarios:
        if args.scenarios != ["contention"] or args.profile or args.soak:
            return "--scenarios contention runs alone (its own phases and targets)"
        return None
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown or not args.scenarios:
        return f"--scenarios: unknown {unknown or 'empty'}; choose from {', '.join(SCENARIOS)}"
    if args.engine != "sglang" and any(SCENARIOS[s].env == "pd" for s in args.scenarios):
        return f"--engine {args.engine}: prefill-decode scenarios need SGLang workers"
    if args.routers is not None:
        bad = [r for r in args.routers if r not in ROUTERS]
        if bad:
            return f"--routers: unknown {bad}; choose from {', '.join(ROUTERS)}"
    positive = (
        "duration",
        "concurrency",
        "workers",
        "tokens_per_chunk",
        "prompt_tokens",
        "max_tokens",
        "soak_duration",
        "soak_concurrency",
        "soak_interval",
        "paced_streams",
        "paced_max_tokens",
        "prefix_groups",
        "dp_size",
        "dp_max_running",
        "rounds",
        "kv_cache_tokens",
        "kv_block_size",
        "kv_max_tokens",
        "kv_groups",
        "kv_conversations",
        "kv_turns",
        "kv_system_tokens",
        "kv_turn_tokens",
    )
    for name in positive:
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')} must be > 0"
    if args.router_cpus is not None:
        try:
            plan_cpus(args.router_cpus)
        except ValueError as exc:
            return f"--router-cpus: {exc}"
    if args.warmup < 0 or args.loadgen_processes < 0 or args.dp_delay_ms < 0:
        return "--warmup, --loadgen-processes and --dp-delay-ms must be >= 0"
    if "kv_cache" in args.scenarios and args.kv_conversations % args.concurrency:
        return "--kv-conversations must be a multiple of --concurrency"
    if min(args.kv_prefill_tokens_per_s, args.kv_delay_ms, args.kv_think_ms) < 0:
        return "--kv-prefill-tokens-per-s, --kv-delay-ms and --kv-think-ms must be >= 0"
    if not args.process_counts or min(args.process_counts) < 1:
        return "--process-counts must list serving process counts >= 1"
    if args.rounds > 1 and (args.profile or args.soak):
        return "--rounds interleaves the targets of the comparison: not with --profile or --soak"
    if args.tracing and (args.profile or args.soak):
        return "--tracing compares turnout with tracing off and on: not with --profile or --soak"
    if args.tracing and importlib.util.find_spec("opentelemetry.sdk") is None:
        return "--tracing needs turnout's tracing extra (pip install 'turnout[tracing]')"
    try:
        parse_delay_range(args.paced_delay_ms)
    except ValueError as exc:
        return f"--paced-delay-ms: {exc}"
    return None


def raise_fd_limit(wanted: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE towards the hard limit (children inherit it); returns the
    (soft, hard) limits now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


# -- the load generators -----------------------------------------------------------------------


def _reader(index: int, stream: IO[str], events: queue.Queue[tuple[int, str | None]]) -> None:
    for line in stream:
        events.put((index, line))
    events.put((index, None))


def run_loadgen(
    args: argparse.Namespace,
    target: str,
    scenario: str,
    plan: LoadPlan,
    *,
    duration: float,
    on_event: OnEvent,
) -> dict[str, Any]:
    """Drive ``target`` with ``plan.processes`` ``bench.loadgen`` processes sharing one window;
    ``on_event(event, loadgen_pids)`` sees the first one's stdout events as they come. Returns
    the summary of all their records merged."""
    shares = split_concurrency(plan.concurrency, plan.processes)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    with tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmp:
        outs = [Path(tmp) / f"loadgen-{p}.json" for p in range(len(shares))]
        errs = [Path(tmp) / f"loadgen-{p}.err" for p in range(len(shares))]
        procs: list[subprocess.Popen[str]] = []
        events: queue.Queue[tuple[int, str | None]] = queue.Queue()
        try:
            for p, (offset, count) in enumerate(shares):
                argv = [
                    *(sys.executable, "-m", "bench.loadgen", "--sync"),
                    *("--target", target, "--scenario", scenario),
                    *("--concurrency", str(count), "--total-concurrency", str(plan.concurrency)),
                    *("--task-offset", str(offset), "--ramp", str(plan.ramp)),
                    *("--duration", str(duration), "--warmup", str(plan.warmup)),
                    *("--prompt-tokens", str(args.prompt_tokens)),
                    *("--max-tokens", str(plan.max_tokens), "--groups", str(plan.groups)),
                    *("--model", MODEL, "--request-timeout", str(args.request_timeout)),
                    *("--progress-every", str(plan.progress_every if p == 0 else 0)),
                    *("--conversations", str(plan.conversations), "--turns", str(plan.turns)),
                    *("--system-tokens", str(plan.system_tokens)),
                    *("--turn-tokens", str(plan.turn_tokens), "--think-ms", str(plan.think_ms)),
                    *("--out", str(outs[p])),
                ]
                with errs[p].open("w") as err:
                    proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                        cwd=ROOT,
                        env=env,
                    )
                procs.append(proc)
                assert proc.stdout is not None
                threading.Thread(target=_reader, args=(p, proc.stdout, events), daemon=True).start()
            window = _start_window(procs, events, plan.warmup, duration)
            pids = [proc.pid for proc in procs]
            _follow(procs, events, on_event, pids, deadline=window[1] + args.request_timeout + 60)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        failed = [p for p, proc in enumerate(procs) if proc.returncode != 0 or not outs[p].exists()]
        if failed:
            p = failed[0]
            raise BenchError(
                f"load generator {p} failed ({procs[p].returncode}) on {target} {scenario}:\n"
                f"{errs[p].read_text(errors='replace')[-2000:]}"
            )
        dumps = [json.loads(out.read_text()) for out in outs]
        records = [Record(*row) for dump in dumps for row in dump["records"]]
        gaps = read_gaps([f"{out}.itl" for out in outs])
    summary = summarize(records, *window, gaps=gaps)
    summary["prompt_tokens"] = dumps[0]["summary"]["prompt_tokens"]
    summary["concurrency"] = plan.concurrency
    summary["loadgen_processes"] = len(procs)
    inside = [r for r in records if window[0] <= r.end <= window[1]]
    summary["routing"] = affinity(inside) if plan.groups and not plan.conversations else None
    return summary


def _start_window(
    procs: list[subprocess.Popen[str]],
    events: queue.Queue[tuple[int, str | None]],
    warmup: float,
    duration: float,
) -> tuple[float, float]:
    """Wait until every load generator is ready, then give them all the same window."""
    ready: set[int] = set()
    deadline = time.monotonic() + LOADGEN_SETUP_TIMEOUT
    while len(ready) < len(procs):
        try:
            index, line = events.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            raise BenchError(
                f"load generators not ready within {LOADGEN_SETUP_TIMEOUT:g}s"
            ) from None
        if line is None:
            raise BenchError(f"load generator {index} exited before it was ready")
        if '"ready"' in line:
            ready.add(index)
    start = time.perf_counter() + warmup
    window = (start, start + duration)
    order = json.dumps({"start": window[0], "end": window[1]}) + "\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(order)
        proc.stdin.close()
    return window


def _follow(
    procs: list[subprocess.Popen[str]],
    events: queue.Queue[tuple[int, str | None]],
    on_event: OnEvent,
    pids: list[int],
    deadline: float,
) -> None:
    """Hand the first load generator's events to ``on_event`` until every one has exited."""
    open_streams = len(procs)
    while open_streams:
        left = deadline - time.perf_counter()
        try:
            index, line = events.get(timeout=max(left, 0.01))
        except queue.Empty:
            raise BenchError("load generators did not finish in time") from None
        if line is None:
            open_streams -= 1
            continue
        if index != 0:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        on_event(event, pids)
    for proc in procs:
        proc.wait(timeout=30)


def _sim_counters(urls: list[str]) -> list[dict[str, int]] | None:
    """Tokens generated so far by each simulated worker (None if one does not answer)."""
    from turnout.sim import get_counters

    async def read() -> list[dict[str, int]]:
        return list(await asyncio.gather(*(get_counters(url) for url in urls)))

    try:
        return asyncio.run(read())
    except Exception:  # a benchmark figure less, not a failed run
        return None


class _Window:
    """CPU samples of the watched process trees at window start and end, RSS of the router
    at every progress event, and the workers' token counters at both edges."""

    def __init__(
        self,
        watched: dict[str, int],
        sim_urls: list[str],
        router: str | None,
        router_port: int | None = None,
    ) -> None:
        self.watched = watched
        self.sim_urls = sim_urls
        self.router = router
        self.router_port = router_port
        #: Client connections held by each process of the router that holds any.
        self.connections: list[int] | None = None
        self.start: dict[str, procfs.TreeSample] = {}
        self.end: dict[str, procfs.TreeSample] = {}
        self.counters: dict[str, list[dict[str, int]] | None] = {}
        self.began = time.monotonic()
        self.rss: list[tuple[float, float]] = []

    def on_event(self, event: dict[str, Any], loadgen_pids: list[int]) -> None:
        kind = event.get("event")
        if kind in ("window_start", "window_end"):
            pids = {**self.watched, **{f"loadgen{i}": p for i, p in enumerate(loadgen_pids)}}
            snapshot = {name: procfs.sample_tree(pid) for name, pid in pids.items()}
            if kind == "window_start":
                self.start = snapshot
                # the load generator's connections are up by now (warm-up) and persist
                self.connections = self._client_connections()
            else:
                self.end = snapshot
            self.counters[kind] = _sim_counters(self.sim_urls)
        if self.router is not None and kind in ("window_start", "progress", "window_end"):
            tree = procfs.sample_tree(self.watched[self.router])
            self.rss.append((time.monotonic() - self.began, tree.rss / 2**20))

    def _client_connections(self) -> list[int] | None:
        if self.router is None or self.router_port is None:
            return None
        pids = procfs.tree_pids(self.watched[self.router])
        counts = procfs.connections_by_pid(pids, local_port=self.router_port).values()
        return sorted((count for count in counts if count), reverse=True)

    def cpu_s(self, name: str) -> float | None:
        if name not in self.start or name not in self.end:
            return None
        return round(self.end[name].cpu_s - self.start[name].cpu_s, 3)

    def ranks_used(self) -> list[dict[str, Any]] | None:
        """Per (worker, rank): requests, tokens and queueing inside the window."""
        first, last = self.counters.get("window_start"), self.counters.get("window_end")
        if not first or not last:
            return None
        return rank_use(first, last)

    def cache_used(self) -> dict[str, Any] | None:
        """Prompt and cached tokens inside the window: the hit rate, per worker."""
        first, last = self.counters.get("window_start"), self.counters.get("window_end")
        if not first or not last:
            return None
        return cache_use(first, last)

    def worker_tokens(self) -> int | None:
        first, last = self.counters.get("window_start"), self.counters.get("window_end")
        if not first or not last:
            return None
        return sum(b["tokens_out"] - a["tokens_out"] for a, b in zip(first, last, strict=True))


def measure(
    args: argparse.Namespace,
    name: str,
    target: str,
    scenario: str,
    *,
    router: Router | None,
    sims: list[Any],
    warmup: float | None = None,
    label: str = "",
) -> dict[str, Any]:
    """One measured run of ``scenario`` against ``target`` with CPU and memory accounting
    (``warmup``: seconds instead of ``--warmup``, the scenario's ramp still included;
    ``label``: printed after the target's name, e.g. the round)."""
    plan = load_plan(SCENARIOS[scenario], args)
    if warmup is not None:
        plan = dataclasses.replace(plan, warmup=max(warmup, plan.ramp))
    sim_pids = [sim.proc.pid for sim in sims]
    watched = {f"sim{i}": pid for i, pid in enumerate(sim_pids)}
    if router is not None:
        watched["router"] = router.pid
        watched.update({f"replica{j}": r.pid for j, r in enumerate(router.replicas)})
    port = int(router.url.rsplit(":", 1)[1]) if router is not None else None
    window = _Window(watched, [sim.url for sim in sims], "router" if router else None, port)
    idle = procfs.sample_tree(router.pid).rss / 2**20 if router is not None else None
    summary = run_loadgen(
        args, target, scenario, plan, duration=args.duration, on_event=window.on_event
    )
    seconds = summary["window_s"]
    sims_cpu = [window.cpu_s(f"sim{i}") for i in range(len(sim_pids))]
    summary["workers_cpu_s"] = round(sum(c or 0.0 for c in sims_cpu), 3)
    loadgen_cpu = [window.cpu_s(f"loadgen{i}") or 0.0 for i in range(summary["loadgen_processes"])]
    summary["loadgen_cpu_s"] = round(sum(loadgen_cpu), 3)
    summary["loadgen_max_cores"] = round(max(loadgen_cpu) / seconds, 3) if seconds else None
    worker_tokens = window.worker_tokens()
    summary["worker_tokens"] = worker_tokens
    if summary["routing"] is not None:
        # Which serving process takes a connection is the kernel's choice: how they were spread.
        summary["routing"]["connections_per_process"] = window.connections
    if SCENARIOS[scenario].env == "kv":
        summary["kv_cache"] = window.cache_used()
    if SCENARIOS[scenario].env == "dp":
        ranks = window.ranks_used()
        summary["ranks"] = ranks
        summary["rank_balance"] = rank_balance(ranks) if ranks else None
    summary["worker_tokens_per_s"] = (
        round(worker_tokens / seconds, 1) if worker_tokens is not None and seconds else None
    )
    if router is not None:
        cpu = window.cpu_s("router")
        replicas_cpu = [window.cpu_s(f"replica{j}") for j in range(len(router.replicas))]
        if cpu is not None and None not in replicas_cpu:
            cpu = round(cpu + sum(c or 0.0 for c in replicas_cpu), 3)
        requests = summary["requests"]
        # long paced streams span windows: count the tokens the workers made inside this one
        long_streams = SCENARIOS[scenario].env == "paced" and worker_tokens
        tokens = worker_tokens if long_streams else summary["output_tokens"]
        summary["router_cpu"] = {
            "seconds": cpu,
            "cores": round(cpu / seconds, 3) if cpu is not None and seconds else None,
            "ms_per_request": round(cpu / requests * 1000, 4) if cpu and requests else None,
            "us_per_token": round(cpu / tokens * 1e6, 3) if cpu and tokens else None,
        }
        end = window.end.get("router")
        summary["router_rss_mb"] = round(end.rss / 2**20, 1) if end else None
        if plan.progress_every > 0:
            summary["memory"] = _memory(window.rss, idle, router, plan.concurrency)
    print(
        f"  {scenario:<18}{name:<11}{label + ' ' if label else ''}"
        f"{summary['requests_per_s'] or 0:>9.1f} req/s "
        f"{summary['errors']:>5} errors"
        + (
            f"  router {summary['router_cpu']['ms_per_request'] or 0:.3f} ms CPU/req"
            if router is not None
            else ""
        ),
        flush=True,
    )
    return summary


def _memory(
    samples: list[tuple[float, float]], idle_mb: float | None, router: Router, streams: int
) -> dict[str, Any]:
    """Router memory under a long run: per open stream, over time, and after the load."""
    after = procfs.sample_tree(router.pid).rss / 2**20
    loaded = [mb for _, mb in samples]
    return {
        "idle_rss_mb": round(idle_mb, 1) if idle_mb is not None else None,
        "loaded_rss_mb": round(sum(loaded) / len(loaded), 1) if loaded else None,
        "max_rss_mb": round(max(loaded), 1) if loaded else None,
        "after_rss_mb": round(after, 1),
        "kib_per_stream": memory_per_stream(idle_mb, loaded, streams),
        "slope_mb_per_min": round(slope_per_minute(samples), 3),
        "samples": [[round(t, 1), round(mb, 2)] for t, mb in samples],
    }


# -- modes ---------------------------------------------------------------------------------------


def _start_routers(
    specs: list[RouterSpec],
    urls: list[str],
    log_dir: Path,
    env: str,
    pd_flags: Sequence[str] = (),
    *,
    cpus: CpuPlan | None = None,
) -> dict[str, Router]:
    routers: dict[str, Router] = {}
    try:
        for spec in specs:
            log_name = f"{env}-{spec.target}"
            if spec.kind == "turnout":
                routers[spec.target] = start_turnout(
                    [] if spec.pd else urls,
                    log_dir,
                    policy=spec.policy,
                    processes=spec.processes,
                    extra=(*spec.extra, *(pd_flags if spec.pd else ())),
                    name=log_name,
                    worker_dp_size=spec.worker_dp_size,
                    config=_turnout_config(spec),
                )
                for r in range(1, spec.replicas):
                    routers[spec.target].replicas.append(
                        start_turnout(urls, log_dir, policy=spec.policy, name=f"{log_name}-{r}")
                    )
            else:
                command = find_smg()
                if command is None:
                    raise BenchError("smg is not installed (pip install smg)")
                routers[spec.target] = start_smg(
                    urls,
                    log_dir,
                    policy=spec.policy,
                    command=command,
                    extra=spec.extra,
                    name=log_name,
                )
            router = routers[spec.target]
            if cpus is not None:
                for pid in (router.pid, *(r.pid for r in router.replicas)):
                    pin_tree(pid, cpus.routers)
            print(f"{spec.target} {router.version} ready at {router.url} ({env})", flush=True)
    except BaseException:
        for router in routers.values():
            router.stop()
        raise
    return routers


def _turnout_config(spec: RouterSpec) -> dict[str, Any] | None:
    config = tracing_config(spec.tracing_endpoint) or {}
    if spec.kv_events is not None:
        config["health"] = {"kv_events": spec.kv_events}
    return config or None


def tracing_config(endpoint: str | None) -> dict[str, Any] | None:
    """turnout's ``tracing`` section for a traced target: every new trace kept (ratio 1.0)."""
    if endpoint is None:
        return None
    return {"tracing": {"endpoint": endpoint, "sampling_ratio": 1.0, "service_name": TRACED}}


def compare_env(
    args: argparse.Namespace,
    env: str,
    scenarios: list[str],
    *,
    sims: list[Any],
    names: list[str],
    log_dir: Path,
    sink: SpanSink | None = None,
) -> tuple[list[dict[str, dict[str, Any]]], dict[str, str]]:
    """Every scenario of ``env`` against direct and the routers, ``args.rounds`` times, the
    targets interleaved (``rounds.round_order``) while routers and workers stay up. Returns
    one result table per round (``sink``: where the traced target's spans go; the spans it
    received during that target's run are recorded)."""
    urls, pd_flags = _env_workers(env, sims)
    upstreams = _http_upstreams(urls, log_dir) if env == "http" else []
    if upstreams:
        urls = [upstream.url for upstream in upstreams]
    try:
        routers = _start_routers(
            router_specs(env, args, names), urls, log_dir, env, pd_flags, cpus=_cpu_plan(args)
        )
    except BaseException:
        _stop_all(upstreams)
        raise
    # kv: the routers are what is compared (direct would be a round robin without a router);
    # http: the load generator speaks gRPC to the sims directly, not to the HTTP servers
    targets = ([] if args.no_direct or env in ("kv", "http") else ["direct"]) + list(routers)
    per_round: list[dict[str, dict[str, Any]]] = [{} for _ in range(args.rounds)]
    try:
        for scenario in scenarios:
            for index, results in enumerate(per_round):
                label = f"r{index + 1}" if args.rounds > 1 else ""
                # later rounds start with warm routers: a short warm-up for the new connections
                warmup = args.warmup if index == 0 else min(args.warmup, LATER_ROUND_WARMUP)
                measured: dict[str, dict[str, Any]] = {}
                for target in round_order(targets, index):
                    router = routers.get(target)
                    url = (
                        ",".join(router.urls) if router is not None else "direct:" + ",".join(urls)
                    )
                    spans_before = sink.spans if sink is not None else 0
                    if env == "kv":
                        flush_caches(urls)  # every target starts with cold caches
                    measured[target] = measure(
                        args,
                        target,
                        url,
                        scenario,
                        router=router,
                        sims=sims,
                        warmup=warmup,
                        label=label,
                    )
                    if sink is not None and target == TRACED:
                        # Warmup included; spans still in the router's queue are not.
                        measured[target]["spans_received"] = sink.spans - spans_before
                results[scenario] = {target: measured[target] for target in targets}
    finally:
        for router in routers.values():
            router.stop()
        _stop_all(upstreams)
    return per_round, {target: r.version for target, r in routers.items()}


def _http_upstreams(sim_urls: list[str], log_dir: Path) -> list[Router]:
    """The ``http`` environment's OpenAI-compatible HTTP servers: a turnout in front of each
    sim (the routers measured balance over them as HTTP workers)."""
    upstreams: list[Router] = []
    try:
        for index, url in enumerate(sim_urls):
            upstream = start_turnout([url], log_dir, policy="round_robin", name=f"http-up{index}")
            print(f"http upstream {index} ready at {upstream.url}", flush=True)
            upstreams.append(upstream)
    except BaseException:
        _stop_all(upstreams)
        raise
    return upstreams


def _stop_all(routers: list[Router]) -> None:
    for router in routers:
        router.stop()


def flush_caches(urls: list[str], idle_wait_s: float = 30.0) -> None:
    """Empty the prefix cache of every worker (once the previous run's requests are done)."""
    from turnout.wire import WorkerClient

    async def flush() -> None:
        for url in urls:
            async with WorkerClient(url) as client:
                answer = await client.flush_cache(idle_wait_s=idle_wait_s)
            if not answer.success:
                raise BenchError(f"flushing the cache of {url} failed: {answer.message}")

    asyncio.run(flush())


def _env_workers(env: str, sims: list[Any]) -> tuple[list[str], list[str]]:
    """The regular workers' URLs (direct and the routers go there), and the turnout flags of
    the environment's prefill-decode pair (``pd``: none otherwise)."""
    if env != "pd":
        return [sim.url for sim in sims], []
    by_role = dict(zip(PD_ROLES, sims, strict=True))
    prefill, decode = by_role["prefill"], by_role["decode"]
    flags = ["--prefill", prefill.url, str(prefill.bootstrap_port), "--decode", decode.url]
    return [by_role["regular"].url], flags


#: Direct's median inter-token gap may exceed the workers' planned mean by this factor before
#: the report says the machine could not keep the pace.
PACE_TOLERANCE = 1.2


def _with_paced_delay(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    """Add to every router's paced measurement the inter-token delay it adds to direct's, and
    to direct's whether the workers kept their planned pace (on a saturated machine they do
    not, and every figure then includes CPU contention)."""
    low, high = parse_delay_range(args.paced_delay_ms)
    planned = (low + high) / 2 * args.tokens_per_chunk
    for scenario, targets in results.items():
        if SCENARIOS[scenario].env != "paced" or "direct" not in targets:
            continue
        direct = targets["direct"]
        p50 = (direct.get("itl_ms") or {}).get("p50")
        direct["pace"] = {
            "planned_ms": planned,
            "direct_itl_p50_ms": p50,
            "kept": p50 is not None and p50 <= planned * PACE_TOLERANCE,
        }
        for name, data in targets.items():
            if name != "direct":
                data["itl_added_ms"] = added_delay(data.get("itl_ms"), direct.get("itl_ms"))


def compare(
    args: argparse.Namespace, names: list[str], log_dir: Path, sim_dir: Path
) -> dict[str, Any]:
    """The default mode: every scenario against direct and the routers, environment by
    environment (each with its own workers and routers)."""
    per_round: list[dict[str, dict[str, Any]]] = [{} for _ in range(args.rounds)]
    versions: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(SpanSink()) if args.tracing else None
        args.tracing_endpoint = sink.endpoint if sink is not None else None
        for env, scenarios in by_env(args.scenarios):
            with _sims(args, env, sim_dir) as sims:
                env_rounds, env_versions = compare_env(
                    args, env, scenarios, sims=sims, names=names, log_dir=log_dir, sink=sink
                )
            for results, env_results in zip(per_round, env_rounds, strict=True):
                results.update(env_results)
            versions.update(env_versions)
        spans = sink.spans if sink is not None else None
    for results in per_round:
        _with_paced_delay(results, args)
    pairs = [("turnout", "smg"), ("turnout", "direct"), ("smg", "direct")]
    pairs += [(TRACED, "turnout"), (TRACED, "smg")]
    pairs += [(f"turnout-p{n}", "turnout") for n in args.process_counts if n != 1]
    pairs += [("turnout", "turnout-summed"), ("turnout-pd", "turnout")]
    pairs += [("turnout-cache", "smg-cache"), ("turnout-cache", "turnout-rr")]
    pairs += [("turnout-cache", "turnout-cache-noev"), ("turnout-cache-noev", "smg-cache")]
    pairs += [(f"turnout-cache-p{n}", "turnout-cache") for n in args.process_counts if n != 1]
    pairs += [(f"turnout-cache-x{args.kv_replicas}", "turnout-cache")]
    figures = fold(per_round, pairs, args.concurrency)
    out: dict[str, Any] = {"results": figures.pop("results"), "versions": versions}
    if spans is not None:
        out["tracing"] = {"sampling_ratio": 1.0, "spans_received": spans}
    out.update(figures)
    return out


def _sims(args: argparse.Namespace, env: str, sim_dir: Path) -> Any:
    count = len(PD_ROLES) if env == "pd" else args.workers
    return start_sims(count, args_for=lambda i: sim_args(env, args, i, sim_dir))


def profile(args: argparse.Namespace, log_dir: Path, sim_dir: Path) -> dict[str, Any]:
    """Run each scenario against turnout while py-spy samples it; rank the hot spots."""
    command = find_py_spy()
    if command is None:
        raise BenchError("py-spy is not installed (pip install py-spy)")
    results: dict[str, Any] = {}
    version = ""
    for env, scenarios in by_env(args.scenarios):
        with _sims(args, env, sim_dir) as sims:
            spec = router_specs(env, args, ["turnout"])[0]
            urls = [sim.url for sim in sims]
            upstreams = _http_upstreams(urls, log_dir) if env == "http" else []
            try:
                router = _start_routers(
                    [spec],
                    [u.url for u in upstreams] or urls,
                    log_dir,
                    env,
                    cpus=_cpu_plan(args),
                )[spec.target]
                version = router.version
                try:
                    for scenario in scenarios:
                        results[scenario] = _profile_one(args, command, router, scenario, log_dir)
                finally:
                    router.stop()
            finally:
                _stop_all(upstreams)
    return {"profile": results, "versions": {"turnout": version}}


def _profile_one(
    args: argparse.Namespace, command: str, router: Router, scenario: str, log_dir: Path
) -> dict[str, Any]:
    raw = log_dir / f"profile-{scenario}.txt"
    spy: list[subprocess.Popen[bytes]] = []

    def on_event(event: dict[str, Any], _pids: list[int]) -> None:
        if event.get("event") == "window_start":
            spy.append(start_py_spy(command, router.pid, args.duration, raw, args.profile_rate))

    plan = load_plan(SCENARIOS[scenario], args)
    summary = run_loadgen(
        args, router.url, scenario, plan, duration=args.duration, on_event=on_event
    )
    entry: dict[str, Any] = {"requests_per_s": summary["requests_per_s"]}
    if not spy:
        entry["error"] = "the load generator never opened its window"
        return entry
    try:
        _, err = spy[0].communicate(timeout=args.duration + 30)
    except subprocess.TimeoutExpired:
        spy[0].kill()
        _, err = spy[0].communicate()
    if raw.exists():
        entry.update(parse_collapsed(raw.read_text()).top(args.profile_top))
        entry["raw"] = str(raw)
    else:
        entry["error"] = (err or b"").decode(errors="replace")[-500:] or "no output"
    return entry


class _RssSampler:
    """RSS and CPU of a router's tree at each of the load generator's progress events."""

    def __init__(self, name: str, pid: int) -> None:
        self.name = name
        self.pid = pid
        self.began = time.monotonic()
        self.cpu_start: float | None = None
        self.samples: list[dict[str, Any]] = []

    def on_event(self, event: dict[str, Any], _loadgen_pids: list[int]) -> None:
        kind = event.get("event")
        if kind not in ("window_start", "progress", "window_end"):
            return
        tree = procfs.sample_tree(self.pid)
        if self.cpu_start is None:
            self.cpu_start = tree.cpu_s
        sample = {
            "t_s": round(time.monotonic() - self.began, 1),
            "rss_mb": round(tree.rss / 2**20, 2),
            "cpu_s": round(tree.cpu_s - self.cpu_start, 2),
            "requests": event.get("requests"),
            "errors": event.get("errors"),
        }
        self.samples.append(sample)
        if kind == "progress":
            print(
                f"  {self.name} t={sample['t_s']:.0f}s rss={sample['rss_mb']:.1f} MB "
                f"requests={sample['requests']} errors={sample['errors']}",
                flush=True,
            )


def soak(
    args: argparse.Namespace, names: list[str], log_dir: Path, sim_dir: Path
) -> dict[str, Any]:
    """Mixed load at ``--soak-concurrency`` for ``--soak-duration``; RSS sampled over time."""
    results: dict[str, Any] = {}
    versions: dict[str, str] = {}
    plan = LoadPlan(
        concurrency=args.soak_concurrency,
        max_tokens=args.max_tokens,
        warmup=args.warmup,
        ramp=0.0,
        processes=args.loadgen_processes or 1,
        groups=0,
        progress_every=args.soak_interval,
    )
    with _sims(args, "plain", sim_dir) as sims:
        urls = [sim.url for sim in sims]
        for spec in router_specs("plain", args, names):
            router = _start_routers([spec], urls, log_dir, "plain", cpus=_cpu_plan(args))[
                spec.target
            ]
            versions[spec.target] = router.version
            sampler = _RssSampler(spec.target, router.pid)
            try:
                summary = run_loadgen(
                    args,
                    router.url,
                    "mix",
                    plan,
                    duration=args.soak_duration,
                    on_event=sampler.on_event,
                )
            finally:
                router.stop()
            results[spec.target] = _soak_result(summary, sampler.samples)
    return {"soak": results, "versions": versions}


def _soak_result(summary: dict[str, Any], samples: list[dict[str, Any]]) -> dict[str, Any]:
    rss = [s["rss_mb"] for s in samples] or [0.0]
    settle = samples[max(len(samples) // 10, 1) :] if len(samples) > 2 else samples
    slope = slope_per_minute([(s["t_s"], s["rss_mb"]) for s in settle])
    cpu = samples[-1]["cpu_s"] if samples else None
    return {
        "requests": summary["requests"],
        "errors": summary["errors"],
        "error_samples": summary["error_samples"],
        "requests_per_s": summary["requests_per_s"],
        "latency_ms": summary["latency_ms"],
        "cpu_ms_per_request": round(cpu / summary["requests"] * 1000, 4)
        if cpu and summary["requests"]
        else None,
        "rss_mb": {
            "first": rss[0],
            "last": rss[-1],
            "max": max(rss),
            "slope_mb_per_min": round(slope, 3),
        },
        "samples": samples,
    }


# -- main ------------------------------------------------------------------------------------------


def _machine(fd_limit: tuple[int, int]) -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in load],
        "fd_limit": list(fd_limit),
    }


def _router_names(args: argparse.Namespace) -> list[str]:
    if args.routers is not None:
        return list(args.routers)
    if args.soak:
        return ["turnout"]
    names = ["turnout"]
    if find_smg() is not None:
        names.append("smg")
    else:
        print("smg is not installed (pip install smg): comparing turnout with direct only")
    return names


def _config(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    keys = [
        "duration",
        "warmup",
        "concurrency",
        "scenarios",
        "workers",
        "tokens_per_chunk",
        "prompt_tokens",
        "max_tokens",
        "policy",
        "loadgen_processes",
        "rounds",
    ]
    envs = {SCENARIOS[s].env for s in args.scenarios if s in SCENARIOS}
    if "contention" in args.scenarios:
        keys += [k for k in vars(args) if k.startswith("contention_")]
    if "paced" in envs:
        keys += ["paced_streams", "paced_delay_ms", "paced_max_tokens"]
    if "routing" in envs:
        keys += ["process_counts", "routing_policy", "prefix_groups"]
    if "dp" in envs:
        keys += ["dp_size", "dp_delay_ms", "dp_max_running", "dp_policy"]
    if "kv" in envs:
        keys += ["process_counts", *(k for k in vars(args) if k.startswith("kv_"))]
    config = {key: getattr(args, key) for key in keys}
    config["routers"] = names or ["turnout"]
    config["engine"] = args.engine
    config["tracing"] = args.tracing
    plan = _cpu_plan(args)
    config["router_cpus"] = None if plan is None else sorted(plan.routers)
    config["other_cpus"] = None if plan is None else sorted(plan.others)
    return config


def _cpu_plan(args: argparse.Namespace) -> CpuPlan | None:
    # Planned once, before the harness pins itself to the other CPUs.
    plan: CpuPlan | None = getattr(args, "cpu_plan", None)
    if plan is None and getattr(args, "router_cpus", None) is not None:
        plan = args.cpu_plan = plan_cpus(args.router_cpus)
    return plan


def _cpu_list(text: str) -> frozenset[int]:
    try:
        return parse_cpus(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 2 on bad flags, 1 when it could not run."""
    args = build_parser().parse_args(argv)
    problem = _check_args(args)
    if problem:
        print(f"bench: error: {problem}", file=sys.stderr)
        return 2
    streams = max(args.concurrency, args.paced_streams, args.soak_concurrency)
    fd_limit = raise_fd_limit(4 * streams + 1024)
    if fd_limit[0] < 2 * streams + 256:
        print(f"bench: warning: open-file limit {fd_limit[0]} is low for {streams} streams")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    mode = "profile" if args.profile else "soak" if args.soak else "compare"
    out_path = args.out or Path(tempfile.gettempdir()) / "turnout-bench" / f"{mode}-{stamp}.json"
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="turnout-bench-logs-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    names = [] if args.profile else _router_names(args)
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "mode": mode,
        "started_at": stamp,
        "machine": _machine(fd_limit),
        "config": _config(args, names),
    }
    print(f"bench: {mode}; logs in {log_dir}", flush=True)
    plan = _cpu_plan(args)
    if plan is not None:
        os.sched_setaffinity(0, plan.others)  # the sims and load generators inherit it
        print(f"bench: {plan.describe()}", flush=True)
    try:
        if args.scenarios == ["contention"]:
            result.update(contention.run(args, names, log_dir))
        elif args.profile:
            result.update(profile(args, log_dir, log_dir))
        elif args.soak:
            result["config"].update(
                soak_duration=args.soak_duration,
                soak_concurrency=args.soak_concurrency,
                soak_interval=args.soak_interval,
            )
            result.update(soak(args, names, log_dir, log_dir))
        else:
            result.update(compare(args, names, log_dir, log_dir))
    except (BenchError, StartError, RuntimeError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    result["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    if "results" in result:
        print(render_results(result))
    if "profile" in result:
        print(render_profile(result["profile"], args.profile_top))
    if "soak" in result:
        print(render_soak(result["soak"]))
    if "contention" in result:
        print(contention.render(result["contention"]))
    print(f"\nresult written to {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
