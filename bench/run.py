"""Benchmark turnout against SGLang's Rust router (smg) and against the workers themselves.

    python bench/run.py --duration 20 --concurrency 32        # compare (default)
    python bench/run.py --profile --duration 15               # where turnout's CPU goes
    python bench/run.py --soak --soak-duration 600            # RSS over time at concurrency 64

Simulated workers run with zero delay; each router (turnout, and smg when the ``smg`` command is
installed) is put in front of the same workers, and a separate load-generator process drives
each target with the same workload. The router's CPU is read from ``/proc`` (its whole process
tree) at the start and end of each measured window. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import procfs  # noqa: E402
from bench.profiling import find_py_spy, parse_collapsed, start_py_spy  # noqa: E402
from bench.report import (  # noqa: E402
    check_targets,
    ratios,
    render_profile,
    render_results,
    render_soak,
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
from bench.workload import DEFAULT_SCENARIOS, SCENARIOS  # noqa: E402

SCHEMA = "turnout-bench/1"
ROUTERS = ("turnout", "smg")


class BenchError(RuntimeError):
    """The benchmark could not run (a service did not start, the load generator failed)."""


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


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
    parser.add_argument("--workers", type=int, default=2, help="simulated workers")
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="worker stream interval")
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--policy", default="round_robin", help="policy for both routers")
    parser.add_argument(
        "--turnout-processes", type=int, default=1, help="serving processes of turnout"
    )
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--profile-top", type=int, default=15, help="hot spots to print")
    parser.add_argument("--profile-rate", type=int, default=200, help="py-spy samples/s")
    parser.add_argument("--soak-duration", type=float, default=600.0)
    parser.add_argument("--soak-concurrency", type=int, default=64)
    parser.add_argument("--soak-interval", type=float, default=10.0, help="RSS sample period")
    parser.add_argument("--out", type=Path, default=None, help="JSON result file")
    parser.add_argument("--log-dir", type=Path, default=None, help="router logs (default tmp)")
    return parser


def _check_args(args: argparse.Namespace) -> str | None:
    unknown = [s for s in args.scenarios if s not in SCENARIOS]
    if unknown or not args.scenarios:
        return f"--scenarios: unknown {unknown or 'empty'}; choose from {', '.join(SCENARIOS)}"
    if args.routers is not None:
        bad = [r for r in args.routers if r not in ROUTERS]
        if bad:
            return f"--routers: unknown {bad}; choose from {', '.join(ROUTERS)}"
    positive = ("duration", "concurrency", "workers", "tokens_per_chunk", "prompt_tokens")
    for name in (*positive, "max_tokens", "soak_duration", "soak_concurrency", "soak_interval"):
        if getattr(args, name) <= 0:
            return f"--{name.replace('_', '-')} must be > 0"
    if args.warmup < 0:
        return "--warmup must be >= 0"
    return None


# -- the load generator ------------------------------------------------------------------------


def run_loadgen(
    args: argparse.Namespace,
    target: str,
    scenario: str,
    *,
    concurrency: int,
    duration: float,
    on_event: Callable[[dict[str, Any], int], None],
    progress_every: float = 0.0,
) -> dict[str, Any]:
    """Run ``bench.loadgen`` against ``target``; ``on_event(event, loadgen_pid)`` sees its
    stdout events as they come. Returns its summary."""
    with tempfile.TemporaryDirectory(prefix="turnout-bench-") as tmp:
        out = Path(tmp) / "summary.json"
        argv = [
            sys.executable,
            "-m",
            "bench.loadgen",
            "--target",
            target,
            "--scenario",
            scenario,
            "--concurrency",
            str(concurrency),
            "--duration",
            str(duration),
            "--warmup",
            str(args.warmup),
            "--prompt-tokens",
            str(args.prompt_tokens),
            "--max-tokens",
            str(args.max_tokens),
            "--model",
            MODEL,
            "--request-timeout",
            str(args.request_timeout),
            "--progress-every",
            str(progress_every),
            "--out",
            str(out),
        ]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                on_event(event, proc.pid)
            proc.wait(timeout=args.request_timeout + 30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stderr = proc.stderr.read() if proc.stderr else ""
        if proc.returncode != 0 or not out.exists():
            raise BenchError(
                f"load generator failed ({proc.returncode}) on {target} {scenario}:\n"
                f"{stderr[-2000:]}"
            )
        summary: dict[str, Any] = json.loads(out.read_text())
        return summary


class _Window:
    """CPU samples of the watched process trees at window start and end."""

    def __init__(self, watched: dict[str, int]) -> None:
        self.watched = watched
        self.start: dict[str, procfs.TreeSample] = {}
        self.end: dict[str, procfs.TreeSample] = {}

    def on_event(self, event: dict[str, Any], loadgen_pid: int) -> None:
        kind = event.get("event")
        if kind in ("window_start", "window_end"):
            pids = {**self.watched, "loadgen": loadgen_pid}
            snapshot = {name: procfs.sample_tree(pid) for name, pid in pids.items()}
            if kind == "window_start":
                self.start = snapshot
            else:
                self.end = snapshot

    def cpu_s(self, name: str) -> float | None:
        if name not in self.start or name not in self.end:
            return None
        return round(self.end[name].cpu_s - self.start[name].cpu_s, 3)


def measure(
    args: argparse.Namespace,
    name: str,
    target: str,
    scenario: str,
    *,
    router: Router | None,
    sim_pids: list[int],
) -> dict[str, Any]:
    """One measured run of ``scenario`` against ``target`` with CPU accounting."""
    watched = {f"sim{i}": pid for i, pid in enumerate(sim_pids)}
    if router is not None:
        watched["router"] = router.pid
    window = _Window(watched)
    summary = run_loadgen(
        args,
        target,
        scenario,
        concurrency=args.concurrency,
        duration=args.duration,
        on_event=window.on_event,
    )
    seconds = summary["window_s"]
    sims_cpu = [window.cpu_s(f"sim{i}") for i in range(len(sim_pids))]
    summary["workers_cpu_s"] = round(sum(c or 0.0 for c in sims_cpu), 3)
    summary["loadgen_cpu_s"] = window.cpu_s("loadgen")
    if router is not None:
        cpu = window.cpu_s("router")
        requests = summary["requests"]
        tokens = summary["output_tokens"]
        summary["router_cpu"] = {
            "seconds": cpu,
            "cores": round(cpu / seconds, 3) if cpu is not None and seconds else None,
            "ms_per_request": round(cpu / requests * 1000, 4) if cpu and requests else None,
            "us_per_token": round(cpu / tokens * 1e6, 3) if cpu and tokens else None,
        }
        end = window.end.get("router")
        summary["router_rss_mb"] = round(end.rss / 2**20, 1) if end else None
    print(
        f"  {scenario:<16}{name:<9}{summary['requests_per_s'] or 0:>9.1f} req/s "
        f"{summary['errors']:>5} errors"
        + (
            f"  router {summary['router_cpu']['ms_per_request'] or 0:.3f} ms CPU/req"
            if router is not None
            else ""
        ),
        flush=True,
    )
    return summary


# -- modes ---------------------------------------------------------------------------------------


def _start_routers(
    args: argparse.Namespace, names: list[str], urls: list[str], log_dir: Path
) -> dict[str, Router]:
    routers: dict[str, Router] = {}
    try:
        for name in names:
            if name == "turnout":
                routers[name] = start_turnout(
                    urls, log_dir, policy=args.policy, processes=args.turnout_processes
                )
            else:
                command = find_smg()
                if command is None:
                    raise BenchError("smg is not installed (pip install smg)")
                routers[name] = start_smg(urls, log_dir, policy=args.policy, command=command)
            print(f"{name} {routers[name].version} ready at {routers[name].url}", flush=True)
    except BaseException:
        for router in routers.values():
            router.stop()
        raise
    return routers


def compare(
    args: argparse.Namespace, sims: list[Any], names: list[str], log_dir: Path
) -> dict[str, Any]:
    """The default mode: every scenario against direct, turnout and smg, in turn."""
    urls = [sim.url for sim in sims]
    sim_pids = [sim.proc.pid for sim in sims]
    routers = _start_routers(args, names, urls, log_dir)
    results: dict[str, dict[str, Any]] = {}
    try:
        for scenario in args.scenarios:
            results[scenario] = {}
            if not args.no_direct:
                results[scenario]["direct"] = measure(
                    args,
                    "direct",
                    "direct:" + ",".join(urls),
                    scenario,
                    router=None,
                    sim_pids=sim_pids,
                )
            for name, router in routers.items():
                results[scenario][name] = measure(
                    args, name, router.url, scenario, router=router, sim_pids=sim_pids
                )
    finally:
        for router in routers.values():
            router.stop()
    out: dict[str, Any] = {
        "results": results,
        "versions": {name: r.version for name, r in routers.items()},
    }
    out["ratios"] = {
        "turnout/smg": ratios(results, "turnout", "smg"),
        "turnout/direct": ratios(results, "turnout", "direct"),
        "smg/direct": ratios(results, "smg", "direct"),
    }
    out["targets"] = check_targets(out["ratios"]["turnout/smg"])
    return out


def profile(args: argparse.Namespace, sims: list[Any], log_dir: Path) -> dict[str, Any]:
    """Run each scenario against turnout while py-spy samples it; rank the hot spots."""
    command = find_py_spy()
    if command is None:
        raise BenchError("py-spy is not installed (pip install py-spy)")
    urls = [sim.url for sim in sims]
    router = _start_routers(args, ["turnout"], urls, log_dir)["turnout"]
    results: dict[str, Any] = {}
    try:
        for scenario in args.scenarios:
            raw = log_dir / f"profile-{scenario}.txt"
            spy: list[subprocess.Popen[bytes]] = []

            def on_event(
                event: dict[str, Any], _pid: int, raw: Path = raw, spy: list[Any] = spy
            ) -> None:
                if event.get("event") == "window_start":
                    spy.append(
                        start_py_spy(command, router.pid, args.duration, raw, args.profile_rate)
                    )

            summary = run_loadgen(
                args,
                router.url,
                scenario,
                concurrency=args.concurrency,
                duration=args.duration,
                on_event=on_event,
            )
            entry: dict[str, Any] = {"requests_per_s": summary["requests_per_s"]}
            if spy:
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
            else:
                entry["error"] = "the load generator never opened its window"
            results[scenario] = entry
    finally:
        router.stop()
    return {"profile": results, "versions": {"turnout": router.version}}


def _slope_per_minute(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) points, per minute; 0 with < 2 points."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return cov / var * 60


class _RssSampler:
    """RSS and CPU of a router's tree at each of the load generator's progress events."""

    def __init__(self, name: str, pid: int) -> None:
        self.name = name
        self.pid = pid
        self.began = time.monotonic()
        self.cpu_start: float | None = None
        self.samples: list[dict[str, Any]] = []

    def on_event(self, event: dict[str, Any], _loadgen_pid: int) -> None:
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
    args: argparse.Namespace, sims: list[Any], names: list[str], log_dir: Path
) -> dict[str, Any]:
    """Mixed load at ``--soak-concurrency`` for ``--soak-duration``; RSS sampled over time."""
    urls = [sim.url for sim in sims]
    results: dict[str, Any] = {}
    versions: dict[str, str] = {}
    for name in names:
        router = _start_routers(args, [name], urls, log_dir)[name]
        versions[name] = router.version
        sampler = _RssSampler(name, router.pid)

        try:
            summary = run_loadgen(
                args,
                router.url,
                "mix",
                concurrency=args.soak_concurrency,
                duration=args.soak_duration,
                on_event=sampler.on_event,
                progress_every=args.soak_interval,
            )
        finally:
            router.stop()
        samples = sampler.samples
        rss = [s["rss_mb"] for s in samples] or [0.0]
        settle = samples[max(len(samples) // 10, 1) :] if len(samples) > 2 else samples
        slope = _slope_per_minute([(s["t_s"], s["rss_mb"]) for s in settle])
        cpu = samples[-1]["cpu_s"] if samples else None
        results[name] = {
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
    return {"soak": results, "versions": versions}


# -- main ------------------------------------------------------------------------------------------


def _machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_start": [round(x, 2) for x in load],
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


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 2 on bad flags, 1 when it could not run."""
    args = build_parser().parse_args(argv)
    problem = _check_args(args)
    if problem:
        print(f"bench: error: {problem}", file=sys.stderr)
        return 2
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    mode = "profile" if args.profile else "soak" if args.soak else "compare"
    out_path = args.out or Path(tempfile.gettempdir()) / "turnout-bench" / f"{mode}-{stamp}.json"
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="turnout-bench-logs-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "mode": mode,
        "started_at": stamp,
        "machine": _machine(),
        "config": {
            key: getattr(args, key)
            for key in (
                "duration",
                "warmup",
                "concurrency",
                "scenarios",
                "workers",
                "tokens_per_chunk",
                "prompt_tokens",
                "max_tokens",
                "policy",
            )
        },
    }
    names = [] if args.profile else _router_names(args)
    result["config"]["routers"] = names or ["turnout"]
    print(f"bench: {mode}; logs in {log_dir}", flush=True)
    try:
        with start_sims(args.workers, args.tokens_per_chunk) as sims:
            if args.profile:
                result.update(profile(args, sims, log_dir))
            elif args.soak:
                result["config"].update(
                    soak_duration=args.soak_duration,
                    soak_concurrency=args.soak_concurrency,
                    soak_interval=args.soak_interval,
                )
                result.update(soak(args, sims, names, log_dir))
            else:
                result.update(compare(args, sims, names, log_dir))
    except (BenchError, StartError, RuntimeError) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    if "results" in result:
        print(render_results(result))
    if "profile" in result:
        print(render_profile(result["profile"], args.profile_top))
    if "soak" in result:
        print(render_soak(result["soak"]))
    print(f"\nresult written to {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
