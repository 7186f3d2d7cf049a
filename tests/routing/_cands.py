"""A plain Candidate for policy unit tests (no sockets needed): turnout.testing's, as plugin
authors use it; and a policy for retry tests."""

from __future__ import annotations

from collections.abc import Sequence

from turnout.routing.types import Candidate, RoutingRequest
from turnout.testing.policies import PlainCandidate as Cand
from turnout.testing.policies import candidates

__all__ = ["Cand", "Prefers", "fleet"]


def fleet(n: int) -> list[Cand]:
    return candidates(n)


class Prefers:
    """A policy that picks a candidate of worker ``worker_id`` (its last rank) whenever there is
    one: it would pick a failed worker again unless the dispatcher leaves it out."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        mine = [c for c in candidates if c.id.split("@")[0] == self.worker_id]
        return (mine or list(candidates))[-1]
