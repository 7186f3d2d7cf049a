"""Hash-ring policies: ``prefix_hash`` (prompt head) and ``consistent_hashing`` (routing key)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from turnout.plugins.policies._common import (
    LeastLoaded,
    check_non_negative,
    check_positive,
    hash64,
)
from turnout.plugins.policies._ring import DEFAULT_VNODES, HashRing
from turnout.routing.affinity import adapter_salt
from turnout.routing.types import Candidate, RoutingRequest

_MASK64 = (1 << 64) - 1


class _RingPolicy:
    """Keeps a ring of every worker of the model; unhealthy ones are skipped, not removed,
    so their keys come back to them when they recover."""

    def __init__(self, vnodes: int) -> None:
        self._ring = HashRing(vnodes=vnodes)
        self._least = LeastLoaded()

    def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
        """Make the ring match the model's workers."""
        self._ring.set_members(worker_ids)

    def _by_id(self, candidates: Sequence[Candidate]) -> dict[str, Candidate]:
        by_id = {c.id: c for c in candidates}
        members = self._ring.members
        if not members.issuperset(by_id):
            self._ring.set_members(members.union(by_id))
        return by_id


class PrefixHashPolicy(_RingPolicy):
    """Hash the first ``prefix_token_count`` prompt tokens (or 4x as many characters of an
    untokenized prompt) onto the ring; spill to the next worker clockwise when the owner is
    overloaded (load > ``load_factor`` x mean and > mean + ``balance_abs_threshold``)."""

    def __init__(
        self,
        *,
        prefix_token_count: int = 256,
        load_factor: float = 1.25,
        balance_abs_threshold: float = 10,
        vnodes: int = DEFAULT_VNODES,
    ) -> None:
        check_positive("prefix_token_count", prefix_token_count)
        check_positive("load_factor", load_factor)
        check_non_negative("balance_abs_threshold", balance_abs_threshold)
        super().__init__(vnodes)
        self.prefix_token_count = int(prefix_token_count)
        self.load_factor = float(load_factor)
        self.balance_abs_threshold = float(balance_abs_threshold)

    def key(self, request: RoutingRequest) -> int | None:
        """The ring position of ``request`` (None when it has neither a prompt nor a LoRA
        adapter); the adapter is part of the key, so an adapter's prompts keep together."""
        n = self.prefix_token_count
        salt = adapter_salt(request.adapter)
        if request.token_ids:
            head = request.token_ids[:n]
            # The hash of a tuple of ints is not salted per process (unlike str/bytes), so it
            # is the same in every replica; it is also ~10x cheaper than packing + blake2b.
            head = head if isinstance(head, tuple) else tuple(head)
            return hash((salt, head) if salt else head) & _MASK64
        if request.text:
            return hash64(request.text[: 4 * n].encode("utf-8", "surrogatepass")) ^ salt
        return salt or None

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return the ring owner of the prompt head, or the next one that is not overloaded."""
        if len(candidates) == 1:
            return candidates[0]
        key = self.key(request)
        if key is None:
            return self._least.pick(candidates)
        by_id = self._by_id(candidates)
        mean = sum([c.load for c in candidates]) / len(candidates)
        limit = max(mean * self.load_factor, mean + self.balance_abs_threshold)
        for worker_id in self._ring.walk(key):
            cand = by_id.get(worker_id)
            if cand is not None and cand.load <= limit:
                return cand
        return self._least.pick(candidates)


class ConsistentHashingPolicy(_RingPolicy):
    """Hash the request's routing key (``x-routing-key`` header by default) onto the ring.

    Requests without a key are keyed by their LoRA adapter, if any (an adapter's requests keep
    to one worker); others go to the least-loaded worker. When a worker joins, about 1/N of
    the keys move to it; when the owner is unavailable its keys go to the next worker clockwise.
    """

    def __init__(self, *, vnodes: int = DEFAULT_VNODES, header: str | None = None) -> None:
        super().__init__(vnodes)
        #: Optional header to read when ``RoutingRequest.routing_key`` is not set.
        self.header = header.lower() if header else None

    def _routing_key(self, request: RoutingRequest) -> str | None:
        if request.routing_key:
            return request.routing_key
        if self.header is not None:
            return _header(request.headers, self.header)
        return None

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return the ring owner of the routing key among ``candidates``."""
        routing_key = self._routing_key(request)
        if routing_key is not None:
            key = hash64(routing_key.encode("utf-8", "surrogatepass"))
        elif request.adapter is not None:
            key = adapter_salt(request.adapter)
        else:
            return self._least.pick(candidates)
        by_id = self._by_id(candidates)
        for worker_id in self._ring.walk(key):
            cand = by_id.get(worker_id)
            if cand is not None:
                return cand
        return self._least.pick(candidates)  # pragma: no cover - ring holds every candidate


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    return value or None
