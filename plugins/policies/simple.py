"""The two simplest policies: random and round robin."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

from turnout.routing.types import Candidate, RoutingRequest


class RandomPolicy:
    """Pick a uniformly random candidate. ``seed`` makes the choice reproducible."""

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return a random candidate."""
        return candidates[self._random.randrange(len(candidates))]


class RoundRobinPolicy:
    """Take the candidates in turn; exact when the candidate set is stable."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return the next candidate in turn."""
        return candidates[next(self._counter) % len(candidates)]
