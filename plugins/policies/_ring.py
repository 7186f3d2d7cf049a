"""A consistent-hash ring of worker ids with virtual nodes."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from turnout.plugins.policies._common import hash64

DEFAULT_VNODES = 160


class HashRing:
    """Workers placed at ``vnodes`` pseudo-random points each on a 64-bit ring.

    A key is served by the first worker clockwise from the key's hash. Adding or removing one of
    N workers moves only the keys in the arcs it gains or loses, about 1/N of them. Positions
    depend only on the worker id, so every router replica builds the same ring.
    """

    __slots__ = ("_members", "_owners", "_points", "vnodes")

    def __init__(self, members: Iterable[str] = (), vnodes: int = DEFAULT_VNODES) -> None:
        if vnodes < 1:
            raise ValueError(f"vnodes must be >= 1, got {vnodes!r}")
        self.vnodes = vnodes
        self._members: frozenset[str] = frozenset()
        self._points: list[int] = []
        self._owners: list[str] = []
        self.set_members(members)

    @property
    def members(self) -> frozenset[str]:
        """The worker ids on the ring."""
        return self._members

    def set_members(self, members: Iterable[str]) -> None:
        """Replace the ring's membership (a no-op when unchanged)."""
        new = frozenset(members)
        if new == self._members:
            return
        placed = sorted(
            (hash64(f"{member}#{i}".encode()), member) for member in new for i in range(self.vnodes)
        )
        self._points = [p for p, _ in placed]
        self._owners = [m for _, m in placed]
        self._members = new

    def add(self, member: str) -> None:
        """Put one more worker on the ring."""
        if member not in self._members:
            self.set_members(self._members | {member})

    def walk(self, key: int) -> Iterator[str]:
        """Yield distinct worker ids clockwise from ``key``: the owner first, then fallbacks."""
        n = len(self._points)
        if n == 0:
            return
        start = bisect.bisect_left(self._points, key)
        seen: set[str] = set()
        owners = self._owners
        total = len(self._members)
        for i in range(start, start + n):
            owner = owners[i % n]
            if owner not in seen:
                seen.add(owner)
                yield owner
                if len(seen) == total:
                    return
