"""Throughput of every registered tool parser: MB/s of model output streamed in ~4-char deltas.

Usage: ``python bench/parsers.py [--seconds 0.3]``. Each format's ``render(calls)`` comes from its
test module (``tests/tool_parsers/test_<module>.py``); parsers without one are skipped. Cases:

* ``mixed``: prose + two calls with ordinary arguments, repeated;
* ``long``: one call whose argument is a 64 KiB string (the per-delta cost must stay flat);
* ``scaling``: long arguments in 1-character deltas at 16 KiB and 64 KiB - the time ratio is ~4
  when the cost is linear (16 if it were quadratic).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import turnout
from turnout.plugins.tool_parsers import BUILTIN_TOOL_PARSERS

Render = Callable[[list[tuple[str, dict[str, Any]]]], str]
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
    for n in ("get_weather", "search")
]


def renders() -> dict[str, Render]:
    """Registered parser name -> render function from its test module (if any)."""
    found: dict[str, Render] = {}
    for name, target, *_ in BUILTIN_TOOL_PARSERS:
        module = target.split(":")[0]
        try:
            tests = importlib.import_module(f"tests.tool_parsers.test_{module}")
        except ImportError:
            continue
        render = getattr(tests, "render", None)
        if callable(render):
            found[name] = render
    return found


def run(parser_name: str, text: str, delta: int, seconds: float) -> float:
    """Seconds per pass of ``text`` in ``delta``-sized chunks (best of several passes)."""
    registry = turnout.load_plugins().tool_parsers
    chunks = [text[i : i + delta] for i in range(0, len(text), delta)]
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while True:
        parser = registry.create(parser_name)
        start = time.perf_counter()
        for chunk in chunks:
            parser.parse_incremental(chunk, TOOLS)
        parser.finish()
        best = min(best, time.perf_counter() - start)
        if time.perf_counter() > deadline:
            return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=0.3, help="time per measurement")
    args = ap.parse_args()
    calls = [
        ("get_weather", {"city": "San Francisco", "unit": "celsius", "days": 3}),
        ("search", {"query": 'best "ramen" in 東京', "filters": {"open": True, "max": 10}}),
    ]
    print(f"{'parser':<14} {'mixed MB/s':>11} {'long MB/s':>10} {'1-char 16K->64K':>16}")
    for name, render in renders().items():
        try:
            mixed = ("Let me look that up for you.\n" + render(calls) + "\nDone. ") * 20
            long_text = render([("search", {"query": "x" * 65536})])
            small = render([("search", {"query": "y" * 16384})])
            mixed_t = run(name, mixed, 4, args.seconds)
            long_t = run(name, long_text, 4, args.seconds)
            ratio = run(name, long_text, 1, args.seconds) / run(name, small, 1, args.seconds)
        except Exception as exc:  # a format whose render cannot express these calls
            print(f"{name:<14} skipped: {exc!r}")
            continue
        mb = 1024 * 1024
        print(
            f"{name:<14} {len(mixed.encode()) / mixed_t / mb:>11.2f} "
            f"{len(long_text.encode()) / long_t / mb:>10.2f} {ratio:>16.2f}"
        )


if __name__ == "__main__":
    main()
