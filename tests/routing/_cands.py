"""A plain Candidate for policy unit tests (no sockets needed): turnout.testing's, as plugin
authors use it."""

from __future__ import annotations

from turnout.testing.policies import PlainCandidate as Cand
from turnout.testing.policies import candidates

__all__ = ["Cand", "fleet"]


def fleet(n: int) -> list[Cand]:
    return candidates(n)
