"""OS accounting of a process tree from ``/proc``: CPU seconds (utime + stime), RSS, and the
TCP connections each process holds.

A router may be several processes (a launcher and its children); every figure here is summed
over the whole tree below a root pid, threads included (``/proc/<pid>/stat`` counts all of a
process's threads).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TreeSample",
    "connections_by_pid",
    "cpu_seconds",
    "rss_bytes",
    "sample_tree",
    "tree_pids",
]

_PROC = Path("/proc")
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces)."""
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return raw[raw.rindex(")") + 2 :].split()


def tree_pids(root: int) -> list[int]:
    """``root`` and all of its live descendants (``root`` first); empty if it is gone."""
    children: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    if _stat_fields(root) is None:
        return []
    found, todo = [root], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds consumed so far by ``pids`` (vanished pids count 0)."""
    ticks = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            # after the name: state(0) ppid(1) ... utime(11) stime(12)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / _TICKS


def rss_bytes(pids: Iterable[int]) -> int:
    """Resident set size of ``pids`` summed, in bytes."""
    total = 0
    for pid in pids:
        try:
            resident = int((_PROC / str(pid) / "statm").read_text().split()[1])
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        total += resident * _PAGE
    return total


@dataclass(frozen=True, slots=True)
class TreeSample:
    """CPU seconds and RSS of one process tree at one moment."""

    pids: tuple[int, ...]
    cpu_s: float
    rss: int


def sample_tree(root: int) -> TreeSample:
    """Snapshot of the tree below ``root`` (processes that exited since are not counted)."""
    pids = tuple(tree_pids(root))
    return TreeSample(pids, cpu_seconds(pids), rss_bytes(pids))


_ESTABLISHED = "01"


def _established() -> dict[int, tuple[int, int]]:
    """Socket inode -> (local port, remote port) of every established TCP connection."""
    found: dict[int, tuple[int, int]] = {}
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _ESTABLISHED:
                local = int(fields[1].rsplit(":", 1)[1], 16)
                remote = int(fields[2].rsplit(":", 1)[1], 16)
                found[int(fields[9])] = (local, remote)
    return found


def connections_by_pid(
    pids: Iterable[int], *, local_port: int | None = None, remote_ports: Iterable[int] = ()
) -> dict[int, int]:
    """Established TCP connections each of ``pids`` holds, counting only those on
    ``local_port`` (connections a server accepted) or to one of ``remote_ports`` (connections
    it opened); every pid is in the answer, with 0 when it holds none (or is gone)."""
    sockets = _established()
    remotes = set(remote_ports)
    counts: dict[int, int] = {}
    for pid in pids:
        count = 0
        try:
            fds = list((_PROC / str(pid) / "fd").iterdir())
        except OSError:
            fds = []
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if not target.startswith("socket:["):
                continue
            ports = sockets.get(int(target[8:-1]))
            if ports is not None and (ports[0] == local_port or ports[1] in remotes):
                count += 1
        counts[pid] = count
    return counts
