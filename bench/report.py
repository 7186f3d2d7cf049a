"""Ratios, target checks and the printed tables of a benchmark result."""

from __future__ import annotations

from typing import Any

from bench.scenarios import SCENARIOS

__all__ = ["check_targets", "ratios", "render_profile", "render_results", "render_soak"]

#: (label, key path into one measurement, format)
_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("req/s", ("requests_per_s",), "{:.1f}"),
    ("tok/s", ("output_tokens_per_s",), "{:.0f}"),
    ("p50 ms", ("latency_ms", "p50"), "{:.1f}"),
    ("p99 ms", ("latency_ms", "p99"), "{:.1f}"),
    ("ttft50", ("ttft_ms", "p50"), "{:.1f}"),
    ("ttft99", ("ttft_ms", "p99"), "{:.1f}"),
    ("ev/req", ("events_per_request",), "{:.1f}"),
    ("cpu ms/req", ("router_cpu", "ms_per_request"), "{:.3f}"),
    ("cpu µs/tok", ("router_cpu", "us_per_token"), "{:.2f}"),
    ("cores", ("router_cpu", "cores"), "{:.2f}"),
    ("errors", ("errors",), "{}"),
)

#: Ratio name -> key path; every ratio is turnout / smg of the same run.
_RATIOS: dict[str, tuple[str, ...]] = {
    "requests_per_s": ("requests_per_s",),
    "output_tokens_per_s": ("output_tokens_per_s",),
    "latency_p50": ("latency_ms", "p50"),
    "latency_p99": ("latency_ms", "p99"),
    "ttft_p50": ("ttft_ms", "p50"),
    "ttft_p99": ("ttft_ms", "p99"),
    "cpu_per_request": ("router_cpu", "ms_per_request"),
    "cpu_per_token": ("router_cpu", "us_per_token"),
    "worker_tokens_per_s": ("worker_tokens_per_s",),
}


def _get(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = data
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _ratio(a: Any, b: Any) -> float | None:
    if isinstance(a, int | float) and isinstance(b, int | float) and b:
        return round(a / b, 3)
    return None


def ratios(results: dict[str, dict[str, Any]], num: str, den: str) -> dict[str, dict[str, Any]]:
    """Per scenario, ``num``/``den`` for every ratio metric (None where either is missing)."""
    out: dict[str, dict[str, Any]] = {}
    for scenario, targets in results.items():
        if num in targets and den in targets:
            out[scenario] = {
                name: _ratio(_get(targets[num], path), _get(targets[den], path))
                for name, path in _RATIOS.items()
            }
    return out


#: Same-run turnout/smg ratios the project aims for (issue 21): (scenario, ratio, limit, label).
RATIO_TARGETS: tuple[tuple[str, str, float, str], ...] = (
    ("chat", "cpu_per_request", 1.0, "cpu per non-streaming chat request"),
    ("generate", "cpu_per_request", 1.0, "cpu per /generate request"),
    ("chat_stream", "ttft_p50", 1.5, "streaming TTFT p50"),
    ("chat_stream", "ttft_p99", 1.5, "streaming TTFT p99"),
    ("parse_chat", "cpu_per_token", 1.5, "cpu per token, parsers, non-streaming"),
    ("parse_chat_stream", "cpu_per_token", 1.5, "cpu per token, parsers, streaming"),
)
#: Inter-token delay turnout may add to direct's at p99 with paced workers, milliseconds.
ADDED_ITL_P99_MS = 3.0
#: Throughput floor against smg in every scenario.
MIN_THROUGHPUT = 0.5


def check_targets(
    turnout_vs_smg: dict[str, dict[str, Any]],
    results: dict[str, dict[str, Any]] | None = None,
    concurrency: int | None = None,
) -> list[dict[str, Any]]:
    """The project's targets: CPU and TTFT ratios to smg, the paced delay turnout adds, and a
    throughput floor. Only scenarios that ran are checked."""
    checks: list[dict[str, Any]] = []

    def add(name: str, value: Any, limit: float, at_most: bool, unit: str = "ratio") -> None:
        ok = None if value is None else (value <= limit if at_most else value >= limit)
        checks.append(
            {
                "target": name,
                "value": value,
                "unit": unit,
                "limit": limit,
                "at_most": at_most,
                "met": ok,
            }
        )

    for scenario, ratio, limit, label in RATIO_TARGETS:
        if scenario in turnout_vs_smg:
            where = f" at c={concurrency}" if concurrency and "ttft" in ratio else ""
            add(label + where, turnout_vs_smg[scenario][ratio], limit, True)
    for scenario, targets in (results or {}).items():
        added = (targets.get("turnout") or {}).get("itl_added_ms")
        if added is None:
            continue
        name = f"inter-token delay turnout adds at p99 ({scenario})"
        if not ((targets.get("direct") or {}).get("pace") or {}).get("kept", True):
            # a saturated machine paces every target differently: no verdict
            checks.append(
                {
                    "target": name + " [workers could not keep their pace]",
                    "value": added["p99"],
                    "unit": "ms",
                    "limit": ADDED_ITL_P99_MS,
                    "at_most": True,
                    "met": None,
                }
            )
        else:
            add(name, added["p99"], ADDED_ITL_P99_MS, True, unit="ms")
    for scenario, values in turnout_vs_smg.items():
        # long paced streams outlast the window: their throughput is the workers' token rate
        paced = scenario in SCENARIOS and SCENARIOS[scenario].env == "paced"
        key = "worker_tokens_per_s" if paced else "requests_per_s"
        add(f"throughput ({scenario})", values[key], MIN_THROUGHPUT, False)
    return checks


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "/".join(fmt.format(v) for v in value)
    return fmt.format(value)


_PACED_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("streams", ("concurrency",), "{}"),
    ("wkr tok/s", ("worker_tokens_per_s",), "{:.0f}"),
    ("itl p50", ("itl_ms", "p50"), "{:.1f}"),
    ("itl p99", ("itl_ms", "p99"), "{:.1f}"),
    ("+p50 ms", ("itl_added_ms", "p50"), "{:+.2f}"),
    ("+p99 ms", ("itl_added_ms", "p99"), "{:+.2f}"),
    ("cpu µs/tok", ("router_cpu", "us_per_token"), "{:.2f}"),
    ("KiB/stream", ("memory", "kib_per_stream"), "{:.1f}"),
    ("idle MB", ("memory", "idle_rss_mb"), "{:.1f}"),
    ("max MB", ("memory", "max_rss_mb"), "{:.1f}"),
    ("after MB", ("memory", "after_rss_mb"), "{:.1f}"),
    ("MB/min", ("memory", "slope_mb_per_min"), "{:+.2f}"),
    ("errors", ("errors",), "{}"),
    ("lg cores", ("loadgen_max_cores",), "{:.2f}"),
)
_ROUTING_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("req/s", ("requests_per_s",), "{:.1f}"),
    ("cpu ms/req", ("router_cpu", "ms_per_request"), "{:.3f}"),
    ("cores", ("router_cpu", "cores"), "{:.2f}"),
    ("same wkr", ("routing", "same_worker_share"), "{:.3f}"),
    ("wkrs/group", ("routing", "workers_per_group"), "{:.2f}"),
    ("conns/proc", ("routing", "connections_per_process"), "{}"),
    ("errors", ("errors",), "{}"),
)
_KV_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("hit rate", ("kv_cache", "hit_rate"), "{:.3f}"),
    ("ttft p50", ("ttft_ms", "p50"), "{:.0f}"),
    ("ttft p99", ("ttft_ms", "p99"), "{:.0f}"),
    ("req/s", ("requests_per_s",), "{:.1f}"),
    ("tok/s", ("output_tokens_per_s",), "{:.0f}"),
    ("req mx/avg", ("kv_cache", "requests_max_over_mean"), "{:.3f}"),
    ("prm mx/avg", ("kv_cache", "prompt_max_over_mean"), "{:.3f}"),
    ("cpu ms/req", ("router_cpu", "ms_per_request"), "{:.3f}"),
    ("errors", ("errors",), "{}"),
)
_DP_COLUMNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("req/s", ("requests_per_s",), "{:.1f}"),
    ("p50 ms", ("latency_ms", "p50"), "{:.0f}"),
    ("p99 ms", ("latency_ms", "p99"), "{:.0f}"),
    ("tok mx/avg", ("rank_balance", "tokens_max_over_mean"), "{:.3f}"),
    ("tok cv", ("rank_balance", "tokens_cv"), "{:.3f}"),
    ("req mx/avg", ("rank_balance", "requests_max_over_mean"), "{:.3f}"),
    ("queued s", ("rank_balance", "queue_wait_s_total"), "{:.1f}"),
    ("worst s", ("rank_balance", "queue_wait_s_worst_rank"), "{:.1f}"),
    ("errors", ("errors",), "{}"),
)
_NAME = 18
_TARGET = 15


def _table(
    rows: list[tuple[str, str, dict[str, Any]]],
    columns: tuple[tuple[str, tuple[str, ...], str], ...],
) -> list[str]:
    header = f"{'scenario':<{_NAME}}{'target':<{_TARGET}}" + "".join(f"{c[0]:>11}" for c in columns)
    lines = [header, "-" * len(header)]
    for scenario, target, data in rows:
        row = f"{scenario:<{_NAME}}{target:<{_TARGET}}"
        row += "".join(f"{_cell(_get(data, path), fmt):>11}" for _, path, fmt in columns)
        lines.append(row)
    return lines


def _ratio_table(title: str, table: dict[str, dict[str, Any]]) -> list[str]:
    names = list(_RATIOS)
    lines = ["", title, f"{'scenario':<{_NAME}}" + "".join(f"{n:>20}" for n in names)]
    for scenario, values in table.items():
        lines.append(
            f"{scenario:<{_NAME}}" + "".join(f"{_cell(values[n], '{:.3f}'):>20}" for n in names)
        )
    return lines


def _spread_cells(s: dict[str, Any], fmt: str) -> str:
    rounds = " ".join(_cell(v, fmt) for v in s["values"])
    return "".join(f"{_cell(s[k], fmt):>9}" for k in ("median", "min", "max")) + f"  {rounds}"


def _spread_table(title: str, table: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """One row per (scenario, metric) with a figure: median, min, max and each round's value."""
    lines = ["", title]
    lines.append(f"{'scenario':<{_NAME}}{'ratio':<22}{'median':>9}{'min':>9}{'max':>9}  rounds")
    for scenario, metrics in table.items():
        for metric, s in metrics.items():
            if s["median"] is not None:
                lines.append(f"{scenario:<{_NAME}}{metric:<22}" + _spread_cells(s, "{:.3f}"))
    return lines


def _added_delay_rounds(table: dict[str, dict[str, dict[str, dict[str, Any]]]]) -> list[str]:
    title = "inter-token delay added to the same round's direct, ms (median, min, max; rounds)"
    lines = ["", title]
    for scenario, targets in table.items():
        for target, quantiles in targets.items():
            for q, s in quantiles.items():
                name = f"{target} {q}"
                lines.append(f"{scenario:<{_NAME}}{name:<22}" + _spread_cells(s, "{:+.2f}"))
    return lines


def _check_line(check: dict[str, Any]) -> str:
    verdict = {True: "met", False: "MISSED", None: "n/a"}[check["met"]]
    sign = "<=" if check["at_most"] else ">="
    fmt = "{:+.2f}" if check.get("unit") == "ms" else "{:.3f}"
    if check.get("unit") == "ms":
        value, limit = f"{_cell(check['value'], fmt)} ms", f"{check['limit']} ms"
    else:
        value, limit = f"turnout/smg = {_cell(check['value'], fmt)}", check["limit"]
    if "rounds" in check:
        each = " ".join(_cell(v, fmt) for v in check["rounds"])
        value += f" (median of {len(check['rounds'])} rounds: {each})"
    return f"target {check['target']}: {value} (want {sign} {limit}) {verdict}"


def render_results(result: dict[str, Any]) -> str:
    """Text tables: one row per (scenario, target); the paced and routing figures; the
    same-run ratios (turnout/smg, turnout-pN/turnout, turnout/turnout-summed,
    turnout-pd/turnout) and the targets. With several rounds, the figures are medians and each
    ratio comes with its spread over the rounds."""
    results: dict[str, dict[str, Any]] = result["results"]
    rows = [(s, t, data) for s, targets in results.items() for t, data in targets.items()]
    rounds = len(result.get("rounds") or ())
    lines = [f"figures: median of {rounds} interleaved rounds (errors: summed)"] if rounds else []
    config = result.get("config") or {}
    if config.get("router_cpus"):
        lines.append(
            f"placement: routers on CPU {_cpus(config['router_cpus'])}; workers and load "
            f"generators on CPU {_cpus(config['other_cpus'])}"
        )
    lines += _table(rows, _COLUMNS)
    paced = [row for row in rows if "memory" in row[2] or row[2].get("itl_added_ms")]
    paced += [row for row in rows if row[1] == "direct" and row[0] in {r[0] for r in paced}]
    if paced:
        lines += [
            "",
            "paced streams: inter-token delay (+: added to direct), memory, load generators",
        ]
        lines += _table(sorted(paced, key=lambda r: (r[0], r[1] != "direct")), _PACED_COLUMNS)
        for scenario, target, data in paced:
            pace = data.get("pace")
            if target == "direct" and pace:
                verdict = (
                    "kept"
                    if pace["kept"]
                    else "NOT kept: the machine is saturated, every figure includes CPU contention"
                )
                lines.append(
                    f"{scenario}: workers' planned gap {pace['planned_ms']:.1f} ms, direct p50 "
                    f"{_cell(pace['direct_itl_p50_ms'], '{:.1f}')} ms: pace {verdict}"
                )
    ranked = [row for row in rows if row[2].get("ranks")]
    if ranked:
        lines += ["", "data-parallel ranks: how evenly they worked (queued: s waiting for a slot)"]
        lines += _table(ranked, _DP_COLUMNS)
        lines.append("generated tokens per (worker, rank):")
        for scenario, target, data in ranked:
            cells = " ".join(f"{r['generated_tokens']:>7}" for r in data["ranks"])
            lines.append(f"  {scenario:<{_NAME}}{target:<{_TARGET}}{cells}")
    cached = [row for row in rows if row[2].get("kv_cache")]
    if cached:
        lines += [
            "",
            "prefix cache: hit rate (cached / prompt tokens at the sims), TTFT ms, worker "
            "imbalance (max / mean of requests and prompt tokens per worker)",
        ]
        lines += _table(cached, _KV_COLUMNS)
    routed = [row for row in rows if row[2].get("routing")]
    if routed:
        lines += ["", "routing quality: share of a prefix group's requests on its usual worker"]
        lines += _table(routed, _ROUTING_COLUMNS)
    spreads = result.get("ratio_rounds") or {}
    for name, table in (result.get("ratios") or {}).items():
        if table and (
            name in ("turnout/smg", "turnout/turnout-summed", "turnout-pd/turnout")
            or name.startswith(("turnout-p", "turnout-traced/", "turnout-cache"))
        ):
            if name in spreads:
                title = f"{name} over {rounds} rounds, each round's pair back to back "
                lines += _spread_table(title + "(< 1 is better for latency and CPU)", spreads[name])
            else:
                title = f"{name} (same run; < 1 is better for latency and CPU)"
                lines += _ratio_table(title, table)
    if result.get("itl_added_rounds"):
        lines += _added_delay_rounds(result["itl_added_rounds"])
    tracing = result.get("tracing")
    if tracing:
        lines.append(
            f"\nturnout-traced: sampling ratio {tracing['sampling_ratio']}, "
            f"{tracing['spans_received']} spans received by the bench's OTLP sink"
        )
    checks = result.get("targets") or []
    if checks:
        lines.append("")
        lines += [_check_line(check) for check in checks]
    return "\n".join(lines)


def render_profile(profile: dict[str, Any], n: int = 15) -> str:
    """Text of the hottest functions per profiled scenario."""
    lines: list[str] = []
    for scenario, data in profile.items():
        if "error" in data:
            lines.append(f"[{scenario}] profile failed: {data['error']}")
            continue
        lines.append(f"[{scenario}] {data['samples']} samples; CPU by area (self time):")
        lines.append(
            "  " + ", ".join(f"{a} {s * 100:.1f}%" for a, s in list(data["areas"].items())[:10])
        )
        threads = data.get("threads") or {}
        if threads:
            lines.append(
                "  by thread: "
                + ", ".join(f"{t} {s * 100:.1f}%" for t, s in list(threads.items())[:6])
            )
        for title, key in (
            ("self", "self"),
            ("inclusive (turnout code)", "inclusive_turnout"),
        ):
            lines.append(f"  top {title}:")
            for row in data[key][:n]:
                lines.append(f"    {row['share'] * 100:5.1f}%  {row['function']}")
    return "\n".join(lines)


def render_soak(soak: dict[str, Any]) -> str:
    """Text of a soak run: RSS at start/end/max and its slope, throughput, errors."""
    lines = []
    for router, data in soak.items():
        rss = data["rss_mb"]
        lines.append(
            f"{router}: {data['requests']} requests, {data['errors']} errors, "
            f"{_cell(data['requests_per_s'], '{:.1f}')} req/s; RSS MB first {rss['first']:.1f}, "
            f"last {rss['last']:.1f}, max {rss['max']:.1f}, "
            f"slope {rss['slope_mb_per_min']:+.2f} MB/min after warm-up"
        )
    return "\n".join(lines)


def _cpus(cpus: list[int]) -> str:
    return ",".join(str(cpu) for cpu in cpus)
