"""What the engines' KV events tell a policy: the cached prefix of a request on each candidate.

A candidate (a worker or a DP rank) whose worker streams KV events has a ``kv_index``
(:class:`turnout.workers.kv_index.KvIndex`) and an ``engine_load`` (the last ``EngineLoad`` it
pushed); otherwise both are None, and so they are on candidates that are not the router's own
(a policy's tests may pass anything with ``id``, ``url`` and ``load``).
"""

from __future__ import annotations

from collections.abc import Sequence

from turnout.routing.types import Candidate, RoutingRequest
from turnout.workers.kv_index import KvIndex, iter_block_keys

__all__ = ["cached_tokens", "kv_index_of"]


def kv_index_of(candidate: Candidate) -> KvIndex | None:
    """The candidate's KV index, or None when its worker streams no KV events."""
    index: KvIndex | None = getattr(candidate, "kv_index", None)
    return index


def cached_tokens(request: RoutingRequest, candidates: Sequence[Candidate]) -> list[int] | None:
    """Per candidate, the prompt tokens of ``request`` its engine holds cached (its token ids'
    full blocks, under the request's LoRA adapter); None when a candidate streams no KV events
    or the request has no token ids. The blocks' keys are computed once per block size, and
    only as far as some candidate still holds them."""
    token_ids = request.token_ids
    if not token_ids:
        return None
    indexes: list[KvIndex] = []
    by_size: dict[int, list[int]] = {}
    for i, candidate in enumerate(candidates):
        index = kv_index_of(candidate)
        if index is None:
            return None
        indexes.append(index)
        if index.block_size and len(index):
            by_size.setdefault(index.block_size, []).append(i)
    found = [0] * len(indexes)
    for size, members in by_size.items():
        alive = [(i, indexes[i]) for i in members]
        blocks = 0
        for key in iter_block_keys(token_ids, size, request.adapter):
            if not all(key in index for _, index in alive):
                for i, _ in alive:
                    found[i] = blocks * size
                alive = [(i, index) for i, index in alive if key in index]
                if not alive:
                    break
            blocks += 1
        for i, _ in alive:
            found[i] = blocks * size
    return found
