"""A plain Candidate for policy unit tests (no sockets needed), and a policy for retry tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from turnout.routing.types import Candidate, RoutingRequest


@dataclass
class Cand:
    id: str
    url: str = ""
    load: int = 0


def fleet(n: int) -> list[Cand]:
    return [Cand(f"w{i}", f"grpc://10.0.0.{i}:30000") for i in range(n)]


class Prefers:
    """A policy that picks a candidate of worker ``worker_id`` (its last rank) whenever there is
    one: it would pick a failed worker again unless the dispatcher leaves it out."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        mine = [c for c in candidates if c.id.split("@")[0] == self.worker_id]
        return (mine or list(candidates))[-1]
