"""Figures from raw load-generator records: window summaries, merging several load-generator
processes, inter-token delay, routing affinity, memory per stream, growth over time.

Pure functions (no I/O but the gap files), so that the harness's arithmetic has unit tests.
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any, Protocol

from bench.stats import summarize_ms

__all__ = [
    "Record",
    "added_delay",
    "affinity",
    "cache_use",
    "gaps_in_window",
    "memory_per_stream",
    "rank_balance",
    "rank_use",
    "read_gaps",
    "slope_per_minute",
    "split_concurrency",
    "summarize",
    "write_gaps",
]

MAX_ERROR_SAMPLES = 5


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
    #: Prompt group (shared prefix) of the request, when the workload has groups.
    group: int | None = None
    #: Worker that answered, when the answer names it.
    worker: str | None = None

    def as_row(self) -> list[Any]:
        """A JSON-friendly list (``Record(*row)`` rebuilds it)."""
        return list(astuple(self))


class Gaps(Protocol):
    """Parallel sequences of arrival times and inter-token gaps (``workload.GapLog``)."""

    @property
    def at(self) -> Sequence[float]:
        """Arrival times."""

    @property
    def gap(self) -> Sequence[float]:
        """Seconds since the previous output event of the same request."""


def gaps_in_window(gaps: Gaps, start: float, end: float) -> list[float]:
    """Gaps (seconds) of the output events that arrived inside [start, end]."""
    return [g for t, g in zip(gaps.at, gaps.gap, strict=True) if start <= t <= end]


def summarize(
    records: Iterable[Record], window_start: float, window_end: float, gaps: Gaps | None = None
) -> dict[str, Any]:
    """Throughput, latency and TTFT of the requests that finished inside the window, and the
    inter-token gaps (``itl_ms``) of the output events that arrived inside it."""
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
    itl = gaps_in_window(gaps, window_start, window_end) if gaps is not None else []
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
        "itl_ms": summarize_ms(itl) if itl else None,
        "itl_samples": len(itl),
    }


def write_gaps(path: Path | str, gaps: Gaps) -> None:
    """Store ``gaps`` as float64 pairs (arrival time, gap)."""
    pairs = array("d")
    for at, gap in zip(gaps.at, gaps.gap, strict=True):
        pairs.append(at)
        pairs.append(gap)
    Path(path).write_bytes(pairs.tobytes())


@dataclass(slots=True)
class GapArrays:
    """Gaps read back from a file (or merged from several)."""

    at: array[float]
    gap: array[float]


def read_gaps(paths: Iterable[Path | str]) -> GapArrays:
    """The gaps of every file in ``paths``, merged (missing files count as empty)."""
    merged = GapArrays(array("d"), array("d"))
    for path in paths:
        pairs = array("d")
        try:
            pairs.frombytes(Path(path).read_bytes())
        except FileNotFoundError:
            continue
        merged.at.extend(pairs[0::2])
        merged.gap.extend(pairs[1::2])
    return merged


def split_concurrency(concurrency: int, processes: int) -> list[tuple[int, int]]:
    """(task offset, tasks) of each of ``processes`` load generators sharing ``concurrency``."""
    processes = max(1, min(processes, concurrency))
    base, extra = divmod(concurrency, processes)
    shares: list[tuple[int, int]] = []
    offset = 0
    for p in range(processes):
        count = base + (1 if p < extra else 0)
        shares.append((offset, count))
        offset += count
    return shares


def affinity(records: Iterable[Record]) -> dict[str, Any] | None:
    """Routing quality: of the successful requests that share a prefix group, the share that
    reached the worker their group reached most often (1.0: every group stayed on one worker;
    about 1/workers when requests are spread without regard to their prefix). None when no
    answer named its worker."""
    per_group: dict[int, Counter[str]] = defaultdict(Counter)
    for r in records:
        if r.error is None and r.group is not None and r.worker is not None:
            per_group[r.group][r.worker] += 1
    total = sum(sum(c.values()) for c in per_group.values())
    if not total:
        return None
    kept = sum(c.most_common(1)[0][1] for c in per_group.values())
    return {
        "requests": total,
        "groups": len(per_group),
        "same_worker_share": round(kept / total, 4),
        "workers_per_group": round(sum(len(c) for c in per_group.values()) / len(per_group), 2),
    }


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float:
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


def memory_per_stream(
    idle_rss_mb: float | None, loaded_rss_mb: Sequence[float], streams: int
) -> float | None:
    """KiB of router RSS per open stream: (mean RSS under load - RSS before it) / streams."""
    if idle_rss_mb is None or not loaded_rss_mb or streams <= 0:
        return None
    mean = sum(loaded_rss_mb) / len(loaded_rss_mb)
    return round((mean - idle_rss_mb) * 1024 / streams, 2)


def added_delay(
    router_itl: dict[str, Any] | None, direct_itl: dict[str, Any] | None
) -> dict[str, float | None]:
    """Inter-token delay a router adds: its p50/p99 gap minus direct's, in ms."""
    out: dict[str, float | None] = {}
    for q in ("p50", "p99"):
        a = (router_itl or {}).get(q)
        b = (direct_itl or {}).get(q)
        out[q] = round(a - b, 3) if a is not None and b is not None else None
    return out


def rank_use(
    before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per (worker, rank), what it did between two ``get_counters`` snapshots of every worker:
    requests, generated tokens and seconds its requests waited for a running slot."""
    out: list[dict[str, Any]] = []
    for w, (a, b) in enumerate(zip(before, after, strict=True)):
        for r, (x, y) in enumerate(zip(a["ranks"], b["ranks"], strict=True)):
            out.append(
                {
                    "worker": w,
                    "rank": r,
                    "requests": int(y["requests"] - x["requests"]),
                    "generated_tokens": int(y["generated_tokens"] - x["generated_tokens"]),
                    "queue_wait_s": round(y["queue_wait_s"] - x["queue_wait_s"], 3),
                }
            )
    return out


def rank_balance(ranks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How evenly ranks worked: max/mean and coefficient of variation of their generated
    tokens, max/mean of their requests, and the seconds requests queued (in all, worst rank)."""
    tokens = [float(r["generated_tokens"]) for r in ranks]
    requests = [float(r["requests"]) for r in ranks]
    waits = [float(r["queue_wait_s"]) for r in ranks]
    mean_tokens = sum(tokens) / len(tokens) if tokens else 0.0
    mean_requests = sum(requests) / len(requests) if requests else 0.0
    spread = (sum((t - mean_tokens) ** 2 for t in tokens) / len(tokens)) ** 0.5 if tokens else 0
    return {
        "tokens_max_over_mean": round(max(tokens) / mean_tokens, 3) if mean_tokens else None,
        "tokens_cv": round(spread / mean_tokens, 3) if mean_tokens else None,
        "requests_max_over_mean": round(max(requests) / mean_requests, 3)
        if mean_requests
        else None,
        "queue_wait_s_total": round(sum(waits), 3),
        "queue_wait_s_worst_rank": round(max(waits, default=0.0), 3),
    }


def cache_use(before: Sequence[dict[str, Any]], after: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The prefix cache between two ``get_counters`` snapshots of every worker: prompt tokens
    admitted, those served from the cache, the hit rate (cached / prompt tokens, all ranks),
    per worker the requests and prompt tokens, and how unevenly the workers were loaded
    (max / mean of their requests and of their prompt tokens)."""
    workers: list[dict[str, int]] = []
    for a, b in zip(before, after, strict=True):
        entry = {"requests": 0, "prompt_tokens": 0, "cached_tokens": 0}
        for x, y in zip(a["ranks"], b["ranks"], strict=True):
            for key in entry:
                entry[key] += int(y[key] - x[key])
        workers.append(entry)
    prompt = sum(w["prompt_tokens"] for w in workers)
    cached = sum(w["cached_tokens"] for w in workers)

    def max_over_mean(key: str) -> float | None:
        values = [w[key] for w in workers]
        mean = sum(values) / len(values) if values else 0
        return round(max(values) / mean, 3) if mean else None

    return {
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": round(cached / prompt, 4) if prompt else None,
        "workers": workers,
        "requests_max_over_mean": max_over_mean("requests"),
        "prompt_max_over_mean": max_over_mean("prompt_tokens"),
    }
