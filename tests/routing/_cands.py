"""A plain Candidate for policy unit tests (no sockets needed)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Cand:
    id: str
    url: str = ""
    load: int = 0


def fleet(n: int) -> list[Cand]:
    return [Cand(f"w{i}", f"grpc://10.0.0.{i}:30000") for i in range(n)]
