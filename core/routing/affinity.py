"""Adapter affinity: keep the requests of one LoRA adapter on the workers that served it lately.

An SGLang worker holds a few adapters in GPU memory (``--max-loras-per-batch``, 8 by default)
and swaps the others in from CPU memory, least recently used out first; a batch runs at most
that many adapters at once, so requests of other adapters wait. Sending an adapter's requests
to the workers that served it lately saves the swaps and the waits. :class:`AdapterAffinity`
remembers, per candidate, the adapters it was last given; a policy asks it which candidates
are *warm* for a request's adapter (:attr:`RoutingRequest.adapter`) and tells it what it chose.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from turnout.routing.types import Candidate, RoutingRequest

__all__ = ["DEFAULT_ADAPTER_SLOTS", "AdapterAffinity", "adapter_salt"]

C = TypeVar("C", bound=Candidate)

#: Adapters remembered per candidate: SGLang's default ``--max-loras-per-batch``.
DEFAULT_ADAPTER_SLOTS = 8


def adapter_salt(adapter: str | None) -> int:
    """A stable 64-bit number for ``adapter`` (0 for none), the same in every process: mix it
    into a hash key so that an adapter's requests key apart from the base model's."""
    if adapter is None:
        return 0
    digest = hashlib.blake2b(adapter.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class AdapterAffinity:
    """The adapters each candidate was given lately (the last ``slots`` per candidate).

    Memory is bounded by the candidates times ``slots``; :meth:`forget` drops departed
    candidates (call it from ``on_workers_changed``).
    """

    __slots__ = ("_recent", "slots")

    def __init__(self, slots: int = DEFAULT_ADAPTER_SLOTS) -> None:
        if slots < 1:
            raise ValueError(f"adapter slots must be >= 1, got {slots!r}")
        self.slots = slots
        self._recent: dict[str, OrderedDict[str, None]] = {}

    def warm(self, adapter: str | None, candidates: Sequence[C]) -> list[C]:
        """The candidates that were given ``adapter`` lately (none for no adapter)."""
        if adapter is None:
            return []
        recent = self._recent
        return [c for c in candidates if adapter in recent.get(c.id, ())]

    def record(self, adapter: str | None, candidate_id: str) -> None:
        """``candidate_id`` was given a request of ``adapter``."""
        if adapter is None:
            return
        held = self._recent.get(candidate_id)
        if held is None:
            held = self._recent[candidate_id] = OrderedDict()
        held[adapter] = None
        held.move_to_end(adapter)
        if len(held) > self.slots:
            held.popitem(last=False)

    def forget(self, alive: Iterable[str]) -> None:
        """Keep only the candidates in ``alive``."""
        keep = set(alive)
        for candidate_id in [c for c in self._recent if c not in keep]:
            del self._recent[candidate_id]

    def choose(
        self,
        request: RoutingRequest,
        candidates: Sequence[C],
        pick: Callable[[Sequence[C]], C],
        slack: float,
    ) -> C:
        """``pick`` among the candidates warm for the request's adapter when the one it picks
        there is loaded at most ``slack`` more than the least-loaded candidate; else ``pick``
        among all. The choice is recorded. Without an adapter this is ``pick(candidates)``."""
        adapter = request.adapter
        if adapter is None:
            return pick(candidates)
        chosen: C | None = None
        warm = self.warm(adapter, candidates)
        if warm:
            best = pick(warm)
            if len(warm) == len(candidates) or best.load <= min(c.load for c in candidates) + slack:
                chosen = best
        if chosen is None:
            chosen = pick(candidates)
        self.record(adapter, chosen.id)
        return chosen
