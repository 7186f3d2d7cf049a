"""``cache_aware``: send a prompt to the worker most likely to hold its prefix in KV cache."""

from __future__ import annotations

from collections.abc import Sequence

from turnout.plugins.policies._common import (
    LeastLoaded,
    check_non_negative,
    check_positive,
    hash64,
)
from turnout.plugins.policies._prefix_index import PrefixIndex
from turnout.routing.affinity import AdapterAffinity, adapter_salt
from turnout.routing.kv import cached_tokens
from turnout.routing.types import Candidate, RoutingRequest

_MASK64 = (1 << 64) - 1
#: The balance gap is never tighter than this many requests: a few more requests than an idle
#: worker are not worth a cache miss (a batching engine runs them side by side). At 2, a burst
#: of a dozen conversations on four workers moved conversations off their cached prefix
#: whenever one worker briefly had three in flight and another none.
MIN_BALANCE_GAP = 4.0
#: Among equally good candidates, the hash's choice passes to the next in hash order when it
#: holds more than this factor times an even share of the requests in flight (consistent
#: hashing with bounded loads): new conversations spread evenly however their prompts hash.
TIE_LOAD_FACTOR = 1.25


class CacheAwarePolicy:
    """Prefix affinity with load balancing (SGLang router semantics, one tree per model).

    Per request:

    1. A candidate is *overloaded* when ``load - min_load`` exceeds the smaller of
       ``balance_abs_threshold`` and the mean load (at least :data:`MIN_BALANCE_GAP`), and ``load >
       balance_rel_threshold * min_load``. Overloaded workers lose their affinity (the SGLang
       router drops affinity for *all* workers once any imbalance appears, which kills the
       cache hit rate under load; here only the overloaded ones are skipped). Capping the
       absolute gap at the mean keeps a worker within about its share plus the mean at any
       concurrency: a fixed gap of 64 is never reached by 32 clients, which then all pile onto
       the worker that holds the common system prompts.
    2. Longest-prefix match among the other candidates; if the matched share of the prompt is
       above ``cache_threshold``, a worker holding that prefix wins.
    3. Otherwise (a cache miss) any candidate that is not overloaded may win.

    Among the equally good candidates the winner is the one the request's first block past the
    matched prefix hashes to (rendezvous hashing on the candidates' ids), passed on in hash
    order while it holds more than :data:`TIE_LOAD_FACTOR` times an even share of the requests
    in flight: a function of the prompt, of what the engines hold and of the loads (which the
    engines push to every router alike), not of this process's history. So every serving
    process and replica sends a new conversation on a shared system prompt to the same worker,
    and its next turn finds it there even before the engine has reported the first one (for
    token prompts; an untokenized text prompt's block keys are per process).

    A request with a LoRA adapter matches only prefixes sent with that adapter (SGLang's
    radix cache keeps an adapter's KV apart), and on a miss the workers that served the adapter
    lately are preferred while at most ``adapter_slack`` more loaded
    (:class:`turnout.routing.AdapterAffinity`).

    When every candidate streams KV events (``SubscribeKvEvents``), the match is on what the
    engines report they hold (:func:`turnout.routing.kv.cached_tokens`), the same in every
    serving process and replica. Otherwise it is on this router's own tree: the prompt is
    recorded under the chosen worker either way. The tree holds at most
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
        # Candidate id -> a hash of it that every process computes alike (rendezvous weights).
        self._seeds: dict[str, int] = {}

    def on_workers_changed(self, worker_ids: Sequence[str]) -> None:
        """Retire the tree bits of workers that left."""
        alive = set(worker_ids)
        self.affinity.forget(alive)
        self._seeds.clear()
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
        """Return the worker with the best prefix match, or a worker that is not overloaded."""
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
        loads = [c.load for c in candidates]
        cutoff = self._overload_cutoff(loads)
        cached = cached_tokens(request, candidates)
        if cached is not None:
            # On the engines' events: ``cached`` tokens per candidate.
            best = max(
                (t for t, load in zip(cached, loads, strict=True) if load <= cutoff), default=0
            )
            depth = best // index.block_size
            hit = bool(best) and best / size > self.cache_threshold
            holders = [
                c
                for c, tokens, load in zip(candidates, cached, loads, strict=True)
                if load <= cutoff and (tokens == best or not hit)
            ]
        else:
            depth, hit, holders = 0, False, []
            if keys:
                bits = self._bits
                cand_bits = [bits.get(c.id) or self._bit(c.id) for c in candidates]
                allowed = 0
                for bit, load in zip(cand_bits, loads, strict=True):
                    if load <= cutoff:
                        allowed |= bit
                depth, tenants = index.match(keys, allowed)
                hit = bool(depth) and depth * unit / size > self.cache_threshold
                holders = [
                    c
                    for c, bit, load in zip(candidates, cand_bits, loads, strict=True)
                    if (bit & tenants if hit else load <= cutoff)
                ]
        if not holders:  # every candidate is overloaded (cannot happen with a finite cutoff)
            holders = list(candidates)
        key = keys[min(depth, len(keys) - 1)] if keys else None

        # Bounded loads: a tied candidate more than TIE_LOAD_FACTOR times its share of the
        # requests in flight (counting this one) passes the turn to the next in hash order.
        bound = TIE_LOAD_FACTOR * (sum(loads) + 1) / len(loads)

        def pick(among: Sequence[Candidate]) -> Candidate:
            return self._rendezvous(among, key, bound)

        if hit:
            chosen = pick(holders)
            self.affinity.record(request.adapter, chosen.id)
        else:
            chosen = self.affinity.choose(request, holders, pick, self.adapter_slack)
        if keys:
            index.insert(keys, self._bit(chosen.id), self._live)
        return chosen

    def _overload_cutoff(self, loads: Sequence[int]) -> float:
        """The load above which a candidate is overloaded (see the class doc, rule 1)."""
        least = min(loads)
        gap = min(self.balance_abs_threshold, max(MIN_BALANCE_GAP, sum(loads) / len(loads)))
        return max(least + gap, self.balance_rel_threshold * least)

    def _rendezvous(self, among: Sequence[Candidate], key: int | None, bound: float) -> Candidate:
        """The first candidate of ``among``, in the order ``key`` hashes them to (highest
        random weight first), whose load is at most ``bound``; the least loaded one when none
        is, or when the request has no key (a prompt shorter than a block)."""
        if len(among) == 1:
            return among[0]
        if key is None:
            return self._least.pick(among)
        seeds = self._seeds
        weighted = []
        for candidate in among:
            seed = seeds.get(candidate.id)
            if seed is None:
                seed = seeds[candidate.id] = hash64(candidate.id.encode("utf-8", "surrogatepass"))
            weighted.append((hash64(((key ^ seed) & _MASK64).to_bytes(8, "little")), candidate))
        weighted.sort(key=lambda pair: pair[0], reverse=True)
        for _, candidate in weighted:
            if candidate.load <= bound:
                return candidate
        return min((candidate for _, candidate in weighted), key=lambda c: c.load)
