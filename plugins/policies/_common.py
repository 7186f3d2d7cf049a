"""Helpers shared by the built-in policies."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TypeVar

from turnout.routing.types import Candidate

C = TypeVar("C", bound=Candidate)


class LeastLoaded:
    """Pick the candidate with the lowest load; ties go round robin.

    Equal loads are told apart by the token work the engines pushed (:func:`token_work`), when
    they push it. A fixed tie-break (e.g. "first in the list") sends every request to the same
    worker while all loads are equal, which is exactly the case of an idle fleet or of
    fast-finishing requests; rotating the starting point spreads them instead.
    """

    __slots__ = ("_turn",)

    def __init__(self) -> None:
        self._turn = 0

    def pick(self, candidates: Sequence[C]) -> C:
        """Return a least-loaded candidate (``candidates`` must not be empty)."""
        n = len(candidates)
        start = self._turn % n
        self._turn = start + 1
        best = candidates[start]
        best_load = best.load
        for i in range(start + 1, start + n):
            cand = candidates[i % n] if i >= n else candidates[i]
            load = cand.load
            if load < best_load or (load == best_load and token_work(cand) < token_work(best)):
                best, best_load = cand, load
        return best


def token_work(candidate: Candidate) -> tuple[int, float]:
    """What breaks a tie of equal loads: the prompt tokens queued on the candidate's engine
    that miss its cache, then its KV-cache use, as its engine pushed them (zeros when it
    pushes no load)."""
    load = getattr(candidate, "engine_load", None)
    if load is None:
        return (0, 0.0)
    return (load.waiting_uncached_tokens, load.token_usage)


def hash64(data: bytes) -> int:
    """A stable 64-bit hash (same value in every process and on every host)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def check_positive(name: str, value: float) -> None:
    """Raise ``ValueError`` naming the parameter when ``value`` is not > 0."""
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")


def check_non_negative(name: str, value: float) -> None:
    """Raise ``ValueError`` naming the parameter when ``value`` is < 0."""
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
