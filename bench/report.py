"""Ratios, target checks and the printed tables of a benchmark result."""

from __future__ import annotations

from typing import Any

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


def check_targets(turnout_vs_smg: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The project's targets against smg: CPU within 2.5x, throughput at least half."""
    checks: list[dict[str, Any]] = []

    def add(name: str, value: Any, limit: float, at_most: bool) -> None:
        ok = None if value is None else (value <= limit if at_most else value >= limit)
        checks.append(
            {"target": name, "ratio": value, "limit": limit, "at_most": at_most, "met": ok}
        )

    if "chat" in turnout_vs_smg:
        add(
            "cpu per non-streaming chat request",
            turnout_vs_smg["chat"]["cpu_per_request"],
            2.5,
            True,
        )
    if "chat_stream" in turnout_vs_smg:
        add("cpu per streamed token", turnout_vs_smg["chat_stream"]["cpu_per_token"], 2.5, True)
    for scenario, values in turnout_vs_smg.items():
        add(f"throughput ({scenario})", values["requests_per_s"], 0.5, False)
    return checks


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    return fmt.format(value)


def render_results(result: dict[str, Any]) -> str:
    """Text tables: one row per (scenario, target), then the turnout/smg ratios and targets."""
    lines: list[str] = []
    header = f"{'scenario':<16}{'target':<9}" + "".join(f"{c[0]:>11}" for c in _COLUMNS)
    lines.append(header)
    lines.append("-" * len(header))
    for scenario, targets in result["results"].items():
        for target, data in targets.items():
            row = f"{scenario:<16}{target:<9}"
            row += "".join(f"{_cell(_get(data, path), fmt):>11}" for _, path, fmt in _COLUMNS)
            lines.append(row)
    compare = result.get("ratios", {}).get("turnout/smg") or {}
    if compare:
        lines.append("")
        lines.append("turnout / smg (same run; < 1 is better for latency and CPU)")
        names = list(_RATIOS)
        lines.append(f"{'scenario':<16}" + "".join(f"{n:>20}" for n in names))
        for scenario, values in compare.items():
            lines.append(
                f"{scenario:<16}" + "".join(f"{_cell(values[n], '{:.3f}'):>20}" for n in names)
            )
    checks = result.get("targets") or []
    if checks:
        lines.append("")
        for check in checks:
            verdict = {True: "met", False: "MISSED", None: "n/a"}[check["met"]]
            sign = "<=" if check["at_most"] else ">="
            lines.append(
                f"target {check['target']}: turnout/smg = {_cell(check['ratio'], '{:.3f}')} "
                f"(want {sign} {check['limit']}) {verdict}"
            )
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
