"""Profile mode: sample a running router with py-spy and rank where its CPU goes.

py-spy's ``raw`` output is one collapsed stack per line, ``frame;frame;…;leaf COUNT`` with
frames written ``function (file:line)``. Only on-CPU samples are recorded (no ``--idle``), so a
function's share of samples is its share of the router's CPU.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "Profile",
    "area_of",
    "find_py_spy",
    "parse_collapsed",
    "start_py_spy",
]

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

#: (area, path fragment) for libraries, first match wins. py-spy shortens paths relative to
#: ``sys.path`` entries, so turnout's own files appear as ``core/…`` and ``plugins/…``.
_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("litestar", "/litestar/"),
    ("uvicorn", "/uvicorn/"),
    ("grpc", "/grpc/"),
    ("protobuf", "/google/protobuf/"),
    ("msgspec", "/msgspec/"),
    ("tokenizers", "/tokenizers/"),
    ("transformers", "/transformers/"),
    ("jinja2", "/jinja2/"),
    ("asyncio", "/asyncio/"),
    ("h11/httptools", "/h11/"),
    ("h11/httptools", "/httptools/"),
)
_OWN: tuple[tuple[str, str], ...] = (
    ("turnout.plugins", "/plugins/"),
    ("turnout", "/core/"),
    ("turnout", "/turnout/"),
)


#: Start-up frames under every sample; left out of the inclusive table of turnout code.
_ENTRY_FILES = ("(core/__main__.py)", "(core/cli.py)", "(core/server/runner.py)")


def area_of(path: str) -> str:
    """A coarse owner of a source file (turnout, litestar, grpc, asyncio, …)."""
    rooted = "/" + path.lstrip("/")
    for area, needle in (*_LIBRARIES, *_OWN):
        if needle in rooted:
            return area
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    return "stdlib/other"


def _short(path: str) -> str:
    for marker in ("site-packages/", "/work/main/", "/lib/python3.11/", "/lib/python3.12/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


@dataclass
class Profile:
    """Sample counts per function: ``self_`` (leaf) and ``inclusive`` (anywhere in the stack)."""

    total: int
    self_: Counter[str]
    inclusive: Counter[str]
    areas: Counter[str]
    threads: Counter[str]

    def top(self, n: int = 15) -> dict[str, Any]:
        """The ``n`` hottest functions by self and by inclusive samples, and the area shares."""

        def rows(counter: Counter[str]) -> list[dict[str, Any]]:
            return [
                {"function": name, "samples": count, "share": round(count / self.total, 4)}
                for name, count in counter.most_common(n)
            ]

        return {
            "samples": self.total,
            "self": rows(self.self_),
            "inclusive": rows(self.inclusive),
            "inclusive_turnout": rows(
                Counter(
                    {
                        k: v
                        for k, v in self.inclusive.items()
                        if k.startswith("turnout") and not k.endswith(_ENTRY_FILES)
                    }
                )
            ),
            "areas": {
                area: round(count / self.total, 4) for area, count in self.areas.most_common()
            },
            "threads": {
                name: round(count / self.total, 4) for name, count in self.threads.most_common()
            },
        }


def _frame_name(frame: str) -> tuple[str, str]:
    """(display name, area) of one frame."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip(), "other"
    path = match["file"]
    area = area_of(path)
    return f"{area}: {match['func']} ({_short(path)})", area


_THREAD = re.compile(r"^thread \(\d+\): ?(?P<name>.*)$")


def parse_collapsed(text: str) -> Profile:
    """Aggregate py-spy ``raw`` (collapsed) stacks; malformed lines are skipped.

    Root frames that py-spy adds for ``--subprocesses`` (``process PID:"cmd"``) and
    ``--threads`` (``thread (TID): NAME``) are not functions: the thread name is counted
    separately (digits of pool thread numbers kept, so names stay readable).
    """
    self_: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    areas: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    names: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        raw_frames = stack.split(";")
        thread = "?"
        while raw_frames and (
            raw_frames[0].startswith("process ") or raw_frames[0].startswith("thread (")
        ):
            match = _THREAD.match(raw_frames.pop(0))
            if match:
                thread = match["name"] or "?"
        if not raw_frames:
            continue
        frames = [names.get(f) or names.setdefault(f, _frame_name(f)) for f in raw_frames]
        total += count
        threads[thread] += count
        leaf_name, leaf_area = frames[-1]
        self_[leaf_name] += count
        areas[leaf_area] += count
        for name in {name for name, _ in frames}:
            inclusive[name] += count
    return Profile(total, self_, inclusive, areas, threads)


def find_py_spy() -> str | None:
    """The ``py-spy`` command next to this Python, else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file():
        return str(beside)
    return shutil.which("py-spy")


def start_py_spy(
    command: str, pid: int, seconds: float, out: Path, rate: int = 200
) -> subprocess.Popen[bytes]:
    """Record ``pid`` (and its subprocesses) for ``seconds`` into ``out`` (raw format)."""
    argv = [
        command,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(round(seconds), 1)),
        "--rate",
        str(rate),
        "--format",
        "raw",
        "--function",
        "--threads",
        "--subprocesses",
        "--output",
        str(out),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
