"""``cache_aware``: send a prompt to the worker most likely to hold its prefix in KV cache."""

from __future__ import annotations

from collections.abc import Sequence

from turnout.plugins.policies._common import LeastLoaded, check_non_negative, check_positive
from turnout.plugins.policies._prefix_index import PrefixIndex
from turnout.routing.affinity import AdapterAffinity, adapter_salt
from turnout.routing.kv import cached_tokens
from turnout.routing.types import Candidate, RoutingRequest


class CacheAwarePolicy:
    """Prefix affinity with load balancing (SGLang router semantics, one tree per model).

    Per request:

    1. A candidate is *overloaded* when ``load - min_load > balance_abs_threshold`` and
       ``load > balance_rel_threshold * min_load``. Overloaded workers lose their affinity (the
       SGLang router drops affinity for *all* workers once any imbalance appears, which kills
       the cache hit rate under load; here only the overloaded ones are skipped).
    2. Longest-prefix match among the other candidates; if the matched share of the prompt is
       above ``cache_threshold``, the least-loaded worker holding that prefix wins.
    3. Otherwise (a cache miss) the least-loaded candidate wins (ties in turn).

    A request with a LoRA adapter matches only prefixes sent with that adapter (SGLang's
    radix cache keeps an adapter's KV apart), and on a miss the workers that served the adapter
    lately are preferred while at most ``adapter_slack`` more loaded
    (:class:`turnout.routing.AdapterAffinity`).

    When every candidate streams KV events (``SubscribeKvEvents``), the match is on what the
    engines report they hold (:func:`turnout.routing.kv.cached_tokens`), exact and the same in
    every serving process and replica, and the tree is not used; otherwise:
    the prompt is then recorded under the chosen worker. The tree holds at most
    ``max_tree_size`` tokens' worth of ``block_size``-token blocks (text prompts count four
    characters per token) and evicts the least recently used prefixes first.
    ``eviction_interval_secs`` is accepted for configuration compatibility; the bound is
    enforced on every insert, so no periodic sweep is needed.
    """

    def __init__(
        self,
        *,
        cache_threshold: float = 0.3,
        balance_abs_threshold: float = 64,
        balance_rel_threshold: float = 1.5,
        eviction_interval_secs: float = 120,
        max_tree_size: int = 1 << 26,
        block_size: int = 16,
        adapter_slack: float = 2,
    ) -> None:
        if not 0.0 <= cache_threshold <= 1.0:
            raise ValueError(f"cache_threshold must be within [0, 1], got {cache_threshold!r}")
        check_non_negative("balance_abs_threshold", balance_abs_threshold)
        check_positive("balance_rel_threshold", balance_rel_threshold)
        check_positive("eviction_interval_secs", eviction_interval_secs)
        check_non_negative("adapter_slack", adapter_slack)
        self.adapter_slack = float(adapter_slack)
        self.affinity = AdapterAffinity()
        self.cache_threshold = float(cache_threshold)
        self.balance_abs_threshold = float(balance_abs_threshold)
        self.balance_rel_threshold = float(balance_rel_threshold)
        self.eviction_interval_secs = float(eviction_interval_secs)
        self.index = PrefixIndex(block_size=int(block_size), max_tokens=int(max_tree_size))
        self._least = LeastLoaded()
        self._bits: dict[str, int] = {}
        self._next_bit = 0
        self._live = 0
        # Bits of departed workers, reusable once every key that may hold them was evicted.
        self._retired: list[tuple[int, int]] = []

    def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
        """Retire the tree bits of workers that left."""
        alive = set(worker_ids)
        self.affinity.forget(alive)
        for worker_id in [w for w in self._bits if w not in alive]:
            bit = self._bits.pop(worker_id)
            self._live &= ~bit
            self._retired.append((bit, self.index.rotations))

    def _bit(self, worker_id: str) -> int:
        bit = self._bits.get(worker_id)
        if bit is None:
            if self._retired and self.index.rotations >= self._retired[0][1] + 2:
                bit = self._retired.pop(0)[0]
            else:
                bit = 1 << self._next_bit
                self._next_bit += 1
            self._bits[worker_id] = bit
            self._live |= bit
        return bit

    def select(self, request: RoutingRequest, candidates: Sequence[Candidate]) -> Candidate:
        """Return the worker with the best prefix match, or the least-loaded one."""
        cached = cached_tokens(request, candidates)
        if cached is not None:
            return self._select_by_events(request, candidates, cached)
        index = self.index
        salt = adapter_salt(request.adapter)
        if request.token_ids:
            keys = index.keys_for_tokens(request.token_ids, salt)
            size = len(request.token_ids)
            unit = index.block_size
        elif request.text:
            keys = index.keys_for_text(request.text, salt)
            size = len(request.text)
            unit = 4 * index.block_size
        else:
            keys, size, unit = [], 0, 0

        chosen: Candidate | None = None
        if keys:
            bits = self._bits
            cand_bits = [bits.get(c.id) or self._bit(c.id) for c in candidates]
            loads = [c.load for c in candidates]
            min_load = min(loads)
            # Overloaded: load - min > abs and load > rel * min; those lose their affinity.
            cutoff = max(
                min_load + self.balance_abs_threshold, self.balance_rel_threshold * min_load
            )
            allowed = 0
            for bit, load in zip(cand_bits, loads, strict=True):
                if load <= cutoff:
                    allowed |= bit
            depth, tenants = index.match(keys, allowed)
            if depth and depth * unit / size > self.cache_threshold:
                holders = [c for c, bit in zip(candidates, cand_bits, strict=True) if bit & tenants]
                chosen = self._least.pick(holders)
        if chosen is None:
            chosen = self.affinity.choose(request, candidates, self._least.pick, self.adapter_slack)
        else:
            self.affinity.record(request.adapter, chosen.id)
        if keys:
            index.insert(keys, self._bit(chosen.id), self._live)
        return chosen

    def _select_by_events(
        self, request: RoutingRequest, candidates: Sequence[Candidate], cached: list[int]
    ) -> Candidate:
        """Every candidate streams KV events: match on what the engines hold (``cached``
        tokens per candidate), the same balance rules as with the tree."""
        loads = [c.load for c in candidates]
        min_load = min(loads)
        cutoff = max(min_load + self.balance_abs_threshold, self.balance_rel_threshold * min_load)
        best = 0
        for tokens, load in zip(cached, loads, strict=True):
            if load <= cutoff and tokens > best:
                best = tokens
        if best and best / len(request.token_ids) > self.cache_threshold:
            holders = [
                c
                for c, tokens, load in zip(candidates, cached, loads, strict=True)
                if tokens == best and load <= cutoff
            ]
            chosen = self._least.pick(holders)
            self.affinity.record(request.adapter, chosen.id)
            return chosen
        return self.affinity.choose(request, candidates, self._least.pick, self.adapter_slack)
