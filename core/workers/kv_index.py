"""What one engine (one DP rank of a worker) says it holds in its KV cache, from its event stream.

The engine's block hashes are opaque (each engine computes its own), so the index keys a block
by what the router can compute from a request too: the chain of its token ids. A block's key is
``hash((parent key, token ids))``, the first block's parent being the namespace of its LoRA
adapter. A request is matched by the keys of its prompt's full blocks of ``block_size`` tokens
(:func:`block_keys`): the cached prefix is the run of leading keys the index holds.

Keys are Python hashes: the same in one process, which is all an index needs (every process
builds its own from the same events). Memory is bounded by the engine's cache: an index holds
what the engine holds, and the engine evicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from turnout.wire.proto import common_pb2

__all__ = ["MAX_BLOCKS", "KvIndex", "block_keys", "iter_block_keys"]

#: Default bound of an index: 2**20 blocks (16M tokens at 16 tokens a block).
MAX_BLOCKS = 1 << 20


def _namespace(adapter: str | None) -> int:
    return 0 if not adapter else hash(("lora", adapter))


def iter_block_keys(
    token_ids: Sequence[int], block_size: int, adapter: str | None = None
) -> Iterator[int]:
    """The chained keys of the full ``block_size``-token blocks of ``token_ids`` under LoRA
    ``adapter`` (None: the base model), computed as they are taken (a match that ends early
    hashes no further)."""
    parent = _namespace(adapter)
    if isinstance(token_ids, tuple):
        for end in range(block_size, len(token_ids) + 1, block_size):
            parent = hash((parent, token_ids[end - block_size : end]))
            yield parent
    else:
        for end in range(block_size, len(token_ids) + 1, block_size):
            parent = hash((parent, tuple(token_ids[end - block_size : end])))
            yield parent


def block_keys(token_ids: Sequence[int], block_size: int, adapter: str | None = None) -> list[int]:
    """Every key :func:`iter_block_keys` gives."""
    return list(iter_block_keys(token_ids, block_size, adapter))


class KvIndex:
    """The blocks one engine (DP rank) holds, keyed by token chains (see the module doc)."""

    __slots__ = ("_by_hash", "_counts", "block_size", "max_blocks", "stores")

    def __init__(self, max_blocks: int = MAX_BLOCKS) -> None:
        #: Past this many blocks the index starts over (an engine that never reports evictions
        #: must not grow it without bound).
        self.max_blocks = max_blocks
        #: Tokens per block, from the first stored block (0: nothing stored yet).
        self.block_size = 0
        #: The engine's block hash -> the router's key of that block.
        self._by_hash: dict[int, int] = {}
        #: Key -> how many engine blocks have it (one, unless the engine stores twins).
        self._counts: dict[int, int] = {}
        #: Stored events applied since the last rebuild (for tests and ``GET /workers``).
        self.stores = 0

    def __len__(self) -> int:
        return len(self._by_hash)

    def clear(self) -> None:
        """Forget every block (the engine flushed, or events were lost)."""
        self._by_hash.clear()
        self._counts.clear()
        self.stores = 0

    def apply(self, events: Iterable[common_pb2.KvCacheEvent]) -> None:
        """Apply one batch's events in order."""
        for event in events:
            kind = event.WhichOneof("data")
            if kind == "stored":
                self._store(event.stored)
            elif kind == "removed":
                self._remove(event.removed.block_hashes)
            elif kind == "cleared":
                self.clear()

    def _store(self, stored: common_pb2.KvBlocksStored) -> None:
        by_hash = self._by_hash
        counts = self._counts
        if stored.HasField("parent_block_hash"):
            parent = by_hash.get(stored.parent_block_hash)
            if parent is None:  # a parent we never saw (evicted meanwhile): not matchable
                return
        else:
            parent = _namespace(stored.lora_name if stored.HasField("lora_name") else None)
        for block in stored.blocks:
            tokens = tuple(block.token_ids)
            if not self.block_size:
                self.block_size = block.block_size or len(tokens)
            if len(tokens) != self.block_size:
                return  # a partial block: requests are matched by full blocks only
            parent = hash((parent, tokens))
            if block.block_hash in by_hash:
                continue
            if len(by_hash) >= self.max_blocks:
                self.clear()
                return
            by_hash[block.block_hash] = parent
            counts[parent] = counts.get(parent, 0) + 1
        self.stores += 1

    def _remove(self, hashes: Iterable[int]) -> None:
        by_hash = self._by_hash
        counts = self._counts
        for block_hash in hashes:
            key = by_hash.pop(block_hash, None)
            if key is None:
                continue
            left = counts[key] - 1
            if left:
                counts[key] = left
            else:
                del counts[key]

    def __contains__(self, key: object) -> bool:
        """Whether it holds the block of ``key`` (a :func:`block_keys` key)."""
        return key in self._counts

    def matched_blocks(self, keys: Iterable[int]) -> int:
        """How many of ``keys`` (a request's :func:`block_keys`), from the first, it holds."""
        counts = self._counts
        n = 0
        for key in keys:
            if key not in counts:
                break
            n += 1
        return n

    def match(self, token_ids: Sequence[int], adapter: str | None = None) -> int:
        """Prompt tokens of ``token_ids`` (under LoRA ``adapter``) this engine holds cached."""
        if not self.block_size:
            return 0
        keys = iter_block_keys(token_ids, self.block_size, adapter)
        return self.matched_blocks(keys) * self.block_size
