"""A worker's KV-event stream: its cached blocks, its pushed load, and whether it is alive.

One :class:`KvSubscriber` per worker (started by the registry once the worker is healthy,
stopped when it leaves) reads ``SubscribeKvEvents`` and keeps, per DP rank, an
:class:`EngineState`: the :class:`~turnout.workers.kv_index.KvIndex` of the blocks the engine
holds and the last ``EngineLoad`` it pushed. Every serving process and replica subscribes, so
they all route on the same facts.

- Resumed after a reconnect from the batch after the last one seen (bounded back-off). When
  the worker cannot resume (``OUT_OF_RANGE``) or lost events itself (``DATA_LOSS``), the
  subscription starts over from now, and the indexes are rebuilt from scratch.
- Batches are numbered by the stream (SGLang's servicer, ``turnout sim``) or by each rank (smg's
  relay): a batch that goes on neither its rank's numbering nor the stream's is a gap, which
  rebuilds every index, as a restarted numbering does; a ``cleared`` event empties its rank's,
  a snapshot (the whole state replayed) replaces them all.
- A worker that answers UNIMPLEMENTED has no events: nothing is kept, policies fall back.

:meth:`KvSubscriber.verdict` says whether the worker is to leave rotation: its engine silent
past ``wedge_after_s`` (plus the time its pending prefill may take at the rate measured on it),
or its stream, which heartbeats, silent past ``stale_after_s`` since a request of this router
went to it (a servicer sends a record at once when its load moves), or past ``stale_after_s``
plus the longest gap between its records so far (an idle smg servicer heartbeats every 5 s).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Protocol

from turnout.wire.proto import common_pb2
from turnout.workers.errors import KvEventsLost, KvEventsUnsupported
from turnout.workers.kv_index import KvIndex

if TYPE_CHECKING:
    from turnout.workers.worker import Worker

__all__ = ["EngineState", "KvEventSource", "KvSubscriber"]

log = logging.getLogger(__name__)

#: Reconnect back-off bounds (seconds).
_MIN_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 2.0
#: The longest gap between two records of a stream that is learnt (an idle smg servicer
#: heartbeats every 5 s, turnout sim every second).
MAX_GAP_S = 10.0
#: Weight of a new prefill-rate sample in the moving average.
_RATE_WEIGHT = 0.3


class KvEventSource(Protocol):
    """A connection that can stream KV events (the optional call of a
    :class:`~turnout.workers.connection.WorkerConnection`)."""

    def kv_events(self, start_seq: int) -> AsyncIterator[common_pb2.KvEventBatch]:
        """Batches from ``start_seq`` on (0: from now); :class:`KvEventsUnsupported` when the
        worker has no such call."""
        ...


class EngineState:
    """What one engine (DP rank) pushed: its cached blocks and its last load record."""

    __slots__ = ("index", "last_seq", "load", "load_at", "prefill_rate")

    def __init__(self) -> None:
        self.index = KvIndex()
        #: Sequence number of its last batch of events (each rank numbers its own; 0: none).
        self.last_seq = 0
        #: The last ``EngineLoad`` received (None: none yet).
        self.load: common_pb2.EngineLoad | None = None
        #: When it was received (``time.monotonic``).
        self.load_at = 0.0
        #: Prefill tokens per second measured on this engine (0: not yet).
        self.prefill_rate = 0.0

    def take_load(self, load: common_pb2.EngineLoad, now: float) -> None:
        """Keep ``load``, measuring the prefill rate from how fast pending prefill drained."""
        last = self.load
        if last is not None and now > self.load_at:
            drained = last.prefill_pending_tokens - load.prefill_pending_tokens
            if drained > 0:
                rate = drained / (now - self.load_at)
                self.prefill_rate = (
                    rate
                    if not self.prefill_rate
                    else (1 - _RATE_WEIGHT) * self.prefill_rate + _RATE_WEIGHT * rate
                )
        self.load = load
        self.load_at = now

    def silence_excess(
        self, now: float, bound_s: float, assumed_rate: float, *, growing: bool = True
    ) -> float:
        """Seconds the engine has been silent beyond what is allowed (<= 0: not wedged);
        ``growing``: the silence it reported goes on since (its stream heartbeats, so a
        record that ends the silence would have come)."""
        load = self.load
        if load is None or not load.HasField("engine_silence_ms"):
            return 0.0
        silent = load.engine_silence_ms / 1000 + (now - self.load_at if growing else 0.0)
        allowance = load.prefill_pending_tokens / (self.prefill_rate or assumed_rate)
        return silent - bound_s - allowance


class KvSubscriber:
    """The KV-event subscription of one worker (see the module doc)."""

    def __init__(
        self,
        worker: Worker,
        source: KvEventSource,
        clock: Callable[[], float] = time.monotonic,
        *,
        count_load: bool = True,
    ) -> None:
        """``count_load``: the pushed running and waiting counts become the worker's reported
        load (``load_monitor.enabled``; the records still serve wedge detection)."""
        self.worker = worker
        self._source = source
        self._clock = clock
        #: Whether its load records count as the worker's load (for policies).
        self.count_load = count_load
        #: Per DP rank (index = rank).
        self.engines: list[EngineState] = [EngineState() for _ in range(worker.dp_size)]
        #: When the stream last said anything (a batch or a heartbeat).
        self.heard_at = clock()
        #: Whether the stream sends load-only heartbeats (only then is its silence telling).
        self.heartbeats = False
        #: The longest time between two records on one connection (seconds).
        self.longest_gap = 0.0
        #: When a request went to the worker with no record heard since (None: none did).
        self.unanswered_since: float | None = None
        #: False once the worker answered UNIMPLEMENTED.
        self.supported = True
        #: Whether a batch arrived on the current connection.
        self.connected = False
        #: Rebuilds after a gap or a restarted stream.
        self.rebuilds = 0
        #: The sequence number of the stream's last batch of events, whatever its rank.
        self._stream_seq = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def streaming(self) -> bool:
        """Whether the worker's events feed the index (it supports them and has sent some)."""
        return self.supported and self.connected

    def start(self) -> None:
        """Start reading (in a task of the running loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"turnout-kv-events-{self.worker.id}"
            )

    async def stop(self) -> None:
        """Stop reading and wait until the task is gone."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def running(self) -> bool:
        """Whether the reading task is alive."""
        return self._task is not None and not self._task.done()

    async def _run(self) -> None:
        backoff = _MIN_BACKOFF_S
        while True:
            start = self._resume_from()
            if not start and any(len(e.index) for e in self.engines):
                self._rebuild("its stream starts over")  # what happened meanwhile is unknown
            try:
                async for batch in self._source.kv_events(start):
                    self.take(batch)
                    backoff = _MIN_BACKOFF_S
            except KvEventsUnsupported:
                log.info("worker %s streams no KV events; polling its load", self.worker.id)
                self.supported = False
                self.connected = False
                return
            except KvEventsLost as exc:
                # It cannot resume us (or lost events itself): start over from now at once.
                log.info("worker %s: KV events lost (%s); subscribing anew", self.worker.id, exc)
                self._rebuild("the worker lost events or cannot resume")
                self.connected = False
                if start:
                    continue
            except Exception as exc:
                log.debug("worker %s: KV event stream failed: %s", self.worker.id, exc)
                self.connected = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def _resume_from(self) -> int:
        """The batch to resume from: after the last one seen (0: from now)."""
        return self._stream_seq + 1 if self._stream_seq else 0

    @property
    def last_seq(self) -> int:
        """The sequence number of the last batch of events (0: none)."""
        return self._stream_seq

    def take(self, batch: common_pb2.KvEventBatch) -> None:
        """Apply one batch: its events to its rank's index, its load record."""
        now = self._clock()
        if self.connected:
            self.longest_gap = max(self.longest_gap, min(now - self.heard_at, MAX_GAP_S))
        self.heard_at = now
        self.unanswered_since = None
        self.connected = True
        rank = batch.dp_rank if batch.HasField("dp_rank") else 0
        engines = self.engines
        if not 0 <= rank < len(engines):
            if len(engines) != self.worker.dp_size:  # the worker's DP size became known
                engines.extend(EngineState() for _ in range(self.worker.dp_size - len(engines)))
            if not 0 <= rank < len(engines):
                return
        engine = engines[rank]
        if batch.HasField("load"):
            load = batch.load
            engine.take_load(load, now)
            if load.load_only:
                self.heartbeats = True
            if self.count_load:
                self.worker.take_pushed_load(rank, load.running_requests + load.waiting_requests)
        if not batch.events:
            return
        seq = batch.sequence_number
        last = engine.last_seq
        previous = self._stream_seq
        self._stream_seq = seq
        if batch.HasField("snapshot"):
            # A replay of the whole state (parents first), in chunks: it replaces what was known.
            if batch.snapshot.index == 0:
                self._rebuild("the worker sent a snapshot of its cache")
            engine.last_seq = self._stream_seq = seq
            engine.index.apply(batch.events)
            return
        if last and seq <= last:
            if seq == last:
                self._stream_seq = previous
                return  # a repeat
            self._rebuild("the stream restarted")  # a new engine process: numbering anew
        elif last and seq != last + 1 and seq != previous + 1:
            # Neither the rank's numbering nor the stream's goes on: batches were lost (with
            # numbering shared by the ranks, of any rank).
            self._rebuild(f"batches between {max(last, previous)} and {seq} were lost")
        engine.last_seq = self._stream_seq = seq
        engine.index.apply(batch.events)

    def _rebuild(self, why: str, rank: int | None = None) -> None:
        """Forget what rank ``rank`` (None: every rank) holds; its events rebuild it."""
        where = "" if rank is None or len(self.engines) == 1 else f" (rank {rank})"
        log.info("worker %s: rebuilding its KV index%s: %s", self.worker.id, where, why)
        self.rebuilds += 1
        for n, engine in enumerate(self.engines):
            if rank is None or n == rank:
                engine.index.clear()
                engine.last_seq = 0
        if rank is None:
            self._stream_seq = 0

    def verdict(
        self, now: float, wedge_s: float, stale_s: float, assumed_rate: float
    ) -> str | None:
        """Why the worker is to be out of rotation now, or None."""
        if not self.supported:
            return None
        if self.heartbeats:
            since = self.unanswered_since
            if since is not None and self.worker.in_flight:
                # A request of ours moved its load record, which goes out at once when it moves.
                silent, bound = now - since, stale_s
            else:
                # Nothing owed but heartbeats, as far apart as they have been on this stream.
                silent, bound = now - self.heard_at, stale_s + self.longest_gap
            if silent > bound:
                return f"its event stream has been silent for {now - self.heard_at:.1f}s"
        for rank, engine in enumerate(self.engines):
            excess = engine.silence_excess(now, wedge_s, assumed_rate, growing=self.heartbeats)
            if excess > 0:
                where = f" (rank {rank})" if len(self.engines) > 1 else ""
                return f"its engine{where} has produced nothing for {excess + wedge_s:.1f}s"
        return None
