"""A policy that always picks the candidate with the smallest id (handy for pinning traffic)."""

from __future__ import annotations

from collections.abc import Sequence

from turnout.routing import Candidate, RoutingRequest


class FirstWorkerPolicy:
    """Always the first candidate by id."""

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        return min(candidates, key=lambda candidate: candidate.id)
