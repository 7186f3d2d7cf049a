"""CPU pinning for ``--router-cpus``: the routers on CPUs of their own, everything else on the rest.

On a small machine the workers, the load generators and the router share the same cores, so a
router that costs more CPU also slows the workers and the clients, and the delay measured at
the client is mostly CPU sharing. With the routers pinned to their own CPUs (and the harness,
the simulated workers and the load generators to the others, which every child inherits), the
inter-token delay a router adds is its own: its loop's queueing and work, as on a router host
of its own in a cluster. Direct runs keep the same placement of workers and load generators.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from bench.procfs import tree_pids

__all__ = ["CpuPlan", "parse_cpus", "pin_tree", "plan_cpus"]


def parse_cpus(text: str) -> frozenset[int]:
    """CPU numbers from a list such as ``1``, ``0,2`` or ``2-3`` (ranges inclusive)."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise ValueError(f"not a CPU list: {text!r}") from None
        if low < 0 or high < low:
            raise ValueError(f"not a CPU list: {text!r}")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


@dataclass(frozen=True)
class CpuPlan:
    """Where each side runs: the routers on ``routers``, the rest on ``others``."""

    routers: frozenset[int]
    others: frozenset[int]

    def describe(self) -> str:
        """One line for the report."""
        return (
            f"routers pinned to CPU {_listed(self.routers)}; workers, load generators and "
            f"the harness to CPU {_listed(self.others)}"
        )


def plan_cpus(routers: frozenset[int], available: frozenset[int] | None = None) -> CpuPlan:
    """The plan for routers on ``routers`` out of ``available`` (default: this process's
    CPUs); raises ValueError unless both sides get at least one CPU."""
    pool = frozenset(os.sched_getaffinity(0)) if available is None else available
    if not routers <= pool:
        raise ValueError(
            f"CPU {_listed(routers - pool)} not available (this process may use {_listed(pool)})"
        )
    others = pool - routers
    if not others:
        raise ValueError("the routers would take every CPU: the workers need at least one")
    return CpuPlan(routers, others)


def pin_tree(root: int, cpus: frozenset[int]) -> int:
    """Move every thread of ``root`` and of its descendants onto ``cpus``; the threads and
    processes they start later inherit it. Returns how many threads were moved."""
    moved = 0
    for pid in tree_pids(root):
        try:
            threads = [int(entry.name) for entry in Path(f"/proc/{pid}/task").iterdir()]
        except FileNotFoundError:
            continue  # gone meanwhile
        for tid in threads:
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                continue
            moved += 1
    return moved


def _listed(cpus: frozenset[int]) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))
