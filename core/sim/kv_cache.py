"""One DP rank's block prefix cache and the log of its KV events.

The cache holds full blocks of ``block_size`` token ids. A block's hash chains its parent's hash,
the LoRA adapter's name (the cache namespace: the same tokens under another adapter are other
blocks) and its token ids, so a hash names a whole prefix. A request matches its longest cached
prefix, references those blocks while it runs, stores its new full blocks (prompt, then generated
tokens) and releases them at the end. Unreferenced blocks are evicted least recently used first,
leaves before their parents. Every store, eviction and flush is an event in a bounded
:class:`KvEventLog` whose numbered batches map one to one onto ``smg.grpc.common.KvEventBatch``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import time
from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "BlocksRemoved",
    "BlocksStored",
    "CacheCleared",
    "EventBatch",
    "KvCache",
    "KvEvent",
    "KvEventLog",
    "StoredBlock",
    "block_hashes",
]


@dataclass(frozen=True, slots=True)
class StoredBlock:
    """A block as a ``stored`` event lists it (``KvBlock``)."""

    block_hash: int
    token_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BlocksStored:
    """Blocks stored as one chain under ``parent_block_hash`` (None: from the root)."""

    event_id: int
    parent_block_hash: int | None
    blocks: tuple[StoredBlock, ...]
    block_size: int
    lora_name: str | None


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    """Blocks evicted."""

    event_id: int
    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CacheCleared:
    """Every block dropped (a flush)."""

    event_id: int


KvEvent = BlocksStored | BlocksRemoved | CacheCleared


@dataclass(frozen=True, slots=True)
class EventBatch:
    """Events of one cache operation of rank ``dp_rank`` (``KvEventBatch``)."""

    sequence_number: int
    timestamp: float
    events: tuple[KvEvent, ...]
    dp_rank: int


class KvEventLog:
    """The newest ``keep`` batches of a worker's ranks (and at most about ``keep_blocks`` stored
    blocks in them), and a way to wait for the next one.

    Sequence numbers start at 1 and never repeat. The ranks of one endpoint share them (each
    batch names its ``dp_rank``), so one cursor resumes a subscriber to every rank and a gap is
    a gap; a cursor that fell out of the ring is :meth:`expired`.
    """

    def __init__(self, keep: int = 10_000, keep_blocks: int = 100_000) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep!r}")
        self.keep = keep
        self.keep_blocks = keep_blocks
        self._batches: deque[tuple[EventBatch, int]] = deque()
        self._blocks_kept = 0
        self.last_sequence = 0
        self._event_id = 0
        self._changed: asyncio.Event | None = None

    def next_event_id(self) -> int:
        """A fresh ``event_id`` (from 1, across the ranks)."""
        self._event_id += 1
        return self._event_id

    def append(self, events: Sequence[KvEvent], dp_rank: int = 0) -> EventBatch:
        """Number ``events`` of rank ``dp_rank`` as the next batch and wake the waiters."""
        self.last_sequence += 1
        batch = EventBatch(self.last_sequence, time.time(), tuple(events), dp_rank)
        blocks = sum(len(e.blocks) for e in events if isinstance(e, BlocksStored))
        self._batches.append((batch, blocks))
        self._blocks_kept += blocks
        while len(self._batches) > 1 and (
            len(self._batches) > self.keep or self._blocks_kept > self.keep_blocks
        ):
            self._blocks_kept -= self._batches.popleft()[1]
        self.poke()
        return batch

    def poke(self) -> None:
        """Wake the waiters without a batch (the load they report changed)."""
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def expired(self, after: int) -> bool:
        """Whether batches following ``after`` fell out of the ring (0: never)."""
        if after <= 0 or not self._batches:
            return after > self.last_sequence
        return after + 1 < self._batches[0][0].sequence_number or after > self.last_sequence

    def since(self, after: int) -> list[EventBatch]:
        """The kept batches numbered above ``after``, oldest first."""
        if after >= self.last_sequence:
            return []
        skip = max(after + 1 - self._batches[0][0].sequence_number, 0)
        return [batch for batch, _ in itertools.islice(self._batches, skip, None)]

    def changed(self) -> asyncio.Event:
        """An event set when the next batch is appended (or on :meth:`poke`)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed


def block_hashes(tokens: Sequence[int], block_size: int, lora_name: str | None = None) -> list[int]:
    """The chained hash of every full block of ``tokens`` (signed 64-bit, as ``KvBlock``): a
    block's hash covers its parent's hash, the adapter's name and its own token ids."""
    namespace = (lora_name or "").encode() + b"\0"
    data = memoryview(array("I", tokens).tobytes())
    width = block_size * 4
    hashes: list[int] = []
    parent = bytes(8)
    for end in range(width, len(data) + 1, width):
        parent = hashlib.blake2b(
            parent + namespace + data[end - width : end], digest_size=8
        ).digest()
        hashes.append(int.from_bytes(parent, "little", signed=True))
    return hashes


@dataclass(slots=True)
class _Block:
    block_hash: int
    parent: int | None
    token_ids: tuple[int, ...]
    lora_name: str | None
    refs: int = 0
    children: int = 0


@dataclass(slots=True)
class Holding:
    """The blocks one request references, root first (see :meth:`KvCache.hold`)."""

    lora_name: str | None
    #: The cache's flush count when the holding was made (a flush voids older holdings).
    epoch: int
    hashes: list[int] = field(default_factory=list)


class KvCache:
    """A rank's block prefix cache of ``capacity_tokens`` (0: off; nothing is cached), logging
    its events as rank ``dp_rank``."""

    def __init__(
        self, block_size: int, capacity_tokens: int, log: KvEventLog, dp_rank: int = 0
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size!r}")
        self.block_size = block_size
        self.capacity_blocks = max(capacity_tokens, 0) // block_size
        self.log = log
        self.dp_rank = dp_rank
        self._blocks: dict[int, _Block] = {}
        #: Unreferenced blocks, least recently used first.
        self._idle: OrderedDict[int, None] = OrderedDict()
        self._epoch = 0
        #: Prompt tokens looked up, and those found cached (the hit rate).
        self.lookup_tokens = 0
        self.hit_tokens = 0

    @property
    def used_blocks(self) -> int:
        """Blocks held (referenced or not)."""
        return len(self._blocks)

    @property
    def usage(self) -> float:
        """Used blocks over capacity, in [0, 1]."""
        return len(self._blocks) / self.capacity_blocks if self.capacity_blocks else 0.0

    @property
    def hit_rate(self) -> float:
        """Cached prompt tokens over prompt tokens looked up."""
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0

    def peek(self, hashes: Sequence[int]) -> int:
        """Tokens of the longest cached prefix of a prompt with these block ``hashes``."""
        found = 0
        for block_hash in hashes:
            if block_hash not in self._blocks:
                break
            found += 1
        return found * self.block_size

    def matchable(self, prompt_tokens: int, hashes: Sequence[int]) -> Sequence[int]:
        """The block hashes a prompt may be served from: its last token is always computed."""
        return hashes[: (prompt_tokens - 1) // self.block_size]

    def hold(
        self, prompt: Sequence[int], hashes: Sequence[int], lora_name: str | None
    ) -> tuple[Holding, int]:
        """Reference the cached prefix of ``prompt`` (block ``hashes``) and store its other full
        blocks; returns the holding and how many prompt tokens were cached."""
        holding = Holding(lora_name, self._epoch)
        cached = self.peek(self.matchable(len(prompt), hashes))
        matched = cached // self.block_size
        self.lookup_tokens += len(prompt)
        self.hit_tokens += cached
        for block_hash in hashes[:matched]:
            self._ref(block_hash)
            holding.hashes.append(block_hash)
        self._store(holding, prompt, hashes, matched)
        return holding, cached

    def extend(self, holding: Holding, tokens: Sequence[int]) -> None:
        """Store the full blocks of ``tokens`` (the prompt and what was generated so far) past
        what ``holding`` has."""
        have = len(holding.hashes)
        if holding.epoch != self._epoch or len(tokens) < (have + 1) * self.block_size:
            return
        hashes = block_hashes(tokens, self.block_size, holding.lora_name)
        if hashes[:have] != holding.hashes:
            return  # a block of the holding was not stored (the cache was full)
        self._store(holding, tokens, hashes, have)

    def release(self, holding: Holding) -> None:
        """Drop the request's references; its blocks stay cached until evicted (leaves first
        in LRU order: the blocks become idle child before parent)."""
        if holding.epoch != self._epoch:
            holding.hashes.clear()
            return
        for block_hash in reversed(holding.hashes):
            block = self._blocks.get(block_hash)
            if block is None:
                continue
            block.refs -= 1
            if block.refs == 0:
                self._idle[block_hash] = None
                self._idle.move_to_end(block_hash)
        holding.hashes.clear()

    def flush(self) -> None:
        """Drop every block (referenced ones included, as a flush does) and log ``cleared``."""
        self._blocks.clear()
        self._idle.clear()
        self._epoch += 1
        self.log.append([CacheCleared(self.log.next_event_id())], self.dp_rank)

    def live_chains(self) -> list[BlocksStored]:
        """Every cached block as ``stored`` events (``event_id`` 0), parents before children,
        one event per run of blocks that chain on each other: a snapshot of the cache."""
        events: list[BlocksStored] = []
        run: list[StoredBlock] = []
        run_parent: int | None = None
        lora: str | None = None
        for block in self._blocks.values():  # insertion order: a parent is older than its child
            if run and (block.parent != run[-1].block_hash or block.lora_name != lora):
                events.append(BlocksStored(0, run_parent, tuple(run), self.block_size, lora))
                run = []
            if not run:
                run_parent, lora = block.parent, block.lora_name
            run.append(StoredBlock(block.block_hash, block.token_ids))
        if run:
            events.append(BlocksStored(0, run_parent, tuple(run), self.block_size, lora))
        return events

    def _ref(self, block_hash: int) -> None:
        block = self._blocks[block_hash]
        if block.refs == 0:
            self._idle.pop(block_hash, None)
        block.refs += 1

    def _store(
        self, holding: Holding, tokens: Sequence[int], hashes: Sequence[int], start: int
    ) -> None:
        """Store blocks ``start:`` of ``tokens`` as one chain after ``holding``'s last block;
        the evictions that make room and the store are one batch."""
        if self.capacity_blocks == 0:
            return
        size = self.block_size
        parent = holding.hashes[-1] if holding.hashes else None
        first_parent = parent
        stored: list[StoredBlock] = []
        evicted: list[int] = []
        for index in range(start, len(hashes)):
            block_hash = hashes[index]
            if block_hash in self._blocks:  # stored meanwhile by a request with the same prefix
                if stored:
                    break  # keep each event one chain
                self._ref(block_hash)
                holding.hashes.append(block_hash)
                parent = first_parent = block_hash
                continue
            if len(self._blocks) >= self.capacity_blocks and not self._evict_one(evicted):
                break
            token_ids = tuple(tokens[index * size : (index + 1) * size])
            self._blocks[block_hash] = _Block(
                block_hash, parent, token_ids, holding.lora_name, refs=1
            )
            if parent is not None:
                self._blocks[parent].children += 1
            holding.hashes.append(block_hash)
            stored.append(StoredBlock(block_hash, token_ids))
            parent = block_hash
        events: list[KvEvent] = []
        if evicted:
            events.append(BlocksRemoved(self.log.next_event_id(), tuple(evicted)))
        if stored:
            events.append(
                BlocksStored(
                    self.log.next_event_id(), first_parent, tuple(stored), size, holding.lora_name
                )
            )
        if events:
            self.log.append(events, self.dp_rank)

    def _evict_one(self, evicted: list[int]) -> bool:
        """Evict the least recently used idle leaf; False when every block is referenced."""
        for _ in range(len(self._idle)):
            victim, _ = self._idle.popitem(last=False)
            block = self._blocks[victim]
            if block.children:  # a parent goes after its children
                self._idle[victim] = None
                continue
            del self._blocks[victim]
            if block.parent is not None and block.parent in self._blocks:
                self._blocks[block.parent].children -= 1
            evicted.append(victim)
            return True
        return False
