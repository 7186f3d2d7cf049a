"""An approximate prefix tree over prompt blocks, bounded in memory with approximate LRU.

The prompt is cut into fixed-size blocks (``block_size`` tokens, or ``4 * block_size``
characters for untokenized text); block *i* is keyed by a hash chained over blocks 0..i, so
a key stands for the whole prefix up to and including that block, exactly like a path in a
radix tree. Each key maps to a bit mask of the workers ("tenants") that were sent that prefix.
Longest-prefix match is a walk over the chained keys until one is missing: a dict lookup per
block, no per-token work.

Memory is bounded by keeping two generations of keys: touched keys go into the young
generation; when it holds ``capacity`` keys the old generation is dropped and the young one
becomes old (so at most ``2 * capacity`` keys, plus the blocks of one prompt, are held). A key
untouched for a whole generation is thus evicted (least recently used first, approximately),
and a request touches every key of its prefix, so a key never outlives its parent.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Keys per entry are ints; a rough CPython cost per stored key, for sizing.
BYTES_PER_ENTRY = 110


class PrefixIndex:
    """Chained block keys -> tenant bit masks, bounded to ``max_tokens`` worth of blocks."""

    __slots__ = ("_capacity", "_new", "_old", "block_size", "rotations")

    def __init__(self, block_size: int = 16, max_tokens: int = 1 << 26) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size!r}")
        if max_tokens < block_size:
            raise ValueError(f"max_tree_size must be >= block_size, got {max_tokens!r}")
        self.block_size = block_size
        self._capacity = max(1, max_tokens // block_size // 2)
        self._new: dict[int, int] = {}
        self._old: dict[int, int] = {}
        #: How many generations were dropped so far.
        self.rotations = 0

    def __len__(self) -> int:
        """Number of stored prefix keys (an upper bound: a key may be in both generations)."""
        return len(self._new) + len(self._old)

    @property
    def max_entries(self) -> int:
        """The most keys ever held at once."""
        return 2 * self._capacity

    def keys_for_tokens(self, token_ids: Sequence[int], salt: int = 0) -> list[int]:
        """The chained keys of every whole block of ``token_ids``; a ``salt`` (e.g. the LoRA
        adapter's, :func:`turnout.routing.adapter_salt`) starts a chain of its own."""
        tokens = token_ids if isinstance(token_ids, tuple) else tuple(token_ids)
        return _chain(tokens, self.block_size, salt)

    def keys_for_text(self, text: str, salt: int = 0) -> list[int]:
        """The chained keys of every whole ``4 * block_size``-character block of ``text``."""
        return _chain(text, 4 * self.block_size, salt)

    def match(self, keys: Sequence[int], allowed: int) -> tuple[int, int]:
        """Longest prefix held by a tenant in the ``allowed`` mask.

        Returns ``(blocks matched, tenants at that depth restricted to allowed)``; ``(0, 0)``
        when no allowed tenant holds even the first block.
        """
        new, old = self._new, self._old
        depth, tenants = 0, 0
        for key in keys:
            mask = new.get(key)
            if mask is None:
                mask = old.get(key)
                if mask is None:
                    break
            mask &= allowed
            if not mask:
                break
            depth += 1
            tenants = mask
        return depth, tenants

    def insert(self, keys: Sequence[int], tenant_bit: int, keep: int = -1) -> None:
        """Record that the tenant ``tenant_bit`` was sent the prefix ``keys``.

        Tenant bits outside ``keep`` (departed workers) are dropped from the touched keys, so a
        retired bit is not carried forward and can be reused once older keys were evicted.
        """
        new, old = self._new, self._old
        for key in keys:
            mask = new.get(key)
            if mask is None:
                mask = old.get(key, 0)
            new[key] = (mask & keep) | tenant_bit
        if len(new) >= self._capacity:
            self._old = new
            self._new = {}
            self.rotations += 1

    def clear(self) -> None:
        """Forget every prefix."""
        self._new = {}
        self._old = {}


def _chain(seq: Sequence[int] | str, size: int, salt: int = 0) -> list[int]:
    keys: list[int] = []
    h = salt
    for start in range(0, len(seq) - size + 1, size):
        h = hash((h, seq[start : start + size]))
        keys.append(h)
    return keys
