"""A policy with a parameter: send a model's requests to one worker while it is a candidate.

Configured as ``policy: {name: pinned, params: {url: "grpc://10.0.0.5:30000"}}``. Candidates are
only the healthy workers serving the model, so when the pinned worker fails or leaves, requests
go to the least loaded other one, and come back once it is healthy again.
"""

from __future__ import annotations

from collections.abc import Sequence

from turnout.routing import Candidate, RoutingRequest


class PinnedPolicy:
    """``url``: the worker to prefer (``grpc://host:port``); none: the least loaded."""

    def __init__(self, url: str | None = None) -> None:
        if url is not None and not url.startswith("grpc://"):
            raise ValueError(f"url must be a grpc://host:port address, got {url!r}")
        self.url = url

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """The pinned worker when it is a candidate (any of its data-parallel ranks), else
        the least loaded candidate (the first by id on ties)."""
        pinned = [c for c in candidates if c.url == self.url]
        return min(pinned or candidates, key=lambda c: (c.load, c.id))
