"""Test helpers for policy plugins: candidates and routing requests without a router.

A policy is a plain object (``select(request, candidates) -> Candidate``), so most of its tests
need no sockets::

    from turnout.testing.policies import candidates, routing_request

    def test_prefers_the_idle_worker():
        fleet = candidates(3, loads=[4, 0, 2])
        assert MyPolicy().select(routing_request("hello"), fleet).id == "w1"

For the policy inside a running router, see :mod:`turnout.testing.router`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from turnout.routing.types import Candidate, Policy, RoutingRequest

__all__ = ["PlainCandidate", "candidates", "choices", "routing_request"]


@dataclass(slots=True)
class PlainCandidate:
    """A :class:`~turnout.routing.Candidate` as a plain record: set ``load`` as a test goes."""

    id: str
    url: str = ""
    load: int = 0


def candidates(
    count_or_ids: int | Iterable[str] = 3, *, loads: Sequence[int] = ()
) -> list[PlainCandidate]:
    """Candidates ``w0``, ``w1``, ... (or the given ids), at ``grpc://10.0.0.<i>:30000``, with
    ``loads`` (missing ones: 0)."""
    ids = (
        [f"w{i}" for i in range(count_or_ids)]
        if isinstance(count_or_ids, int)
        else list(count_or_ids)
    )
    if len(loads) > len(ids):
        raise ValueError(f"{len(loads)} loads for {len(ids)} candidates")
    padded = [*loads, *[0] * (len(ids) - len(loads))]
    return [
        PlainCandidate(cid, f"grpc://10.0.0.{i}:30000", load)
        for i, (cid, load) in enumerate(zip(ids, padded, strict=True))
    ]


def routing_request(
    text: str | None = None,
    *,
    model: str = "test-model",
    token_ids: Sequence[int] = (),
    headers: Mapping[str, str] | None = None,
    routing_key: str | None = None,
    adapter: str | None = None,
) -> RoutingRequest:
    """A :class:`~turnout.routing.RoutingRequest` as the router builds it (header names
    lower-cased)."""
    return RoutingRequest(
        model=model,
        token_ids=tuple(token_ids),
        text=text,
        headers={name.lower(): value for name, value in (headers or {}).items()},
        routing_key=routing_key,
        adapter=adapter,
    )


def choices(
    policy: Policy, requests: Iterable[RoutingRequest], fleet: Sequence[Candidate]
) -> Counter[str]:
    """How many of ``requests`` the policy sends to each candidate id (every choice must be one
    of ``fleet``)."""
    counts: Counter[str] = Counter()
    for request in requests:
        chosen = policy.select(request, fleet)
        assert any(chosen is c for c in fleet), f"{chosen!r} is not one of the candidates"
        counts[chosen.id] += 1
    return counts
