"""Prefill-decode (PD) dispatch: one request on a pair of workers.

SGLang serves a disaggregated model with two kinds of workers: a *prefill* worker computes the
prompt's KV cache and sends it to a *decode* worker, which generates the answer. The router
picks one of each (each role has its own selection policy) and sends both the same
``GenerateRequest`` at once, with ``disaggregated_params = {bootstrap_host, bootstrap_port,
bootstrap_room}``: the prefill worker's host and KV bootstrap port, and a random non-negative
int32 naming this request's rendezvous. The answer is read from the decode worker; prompt
(input) logprobs, when asked for, only come from the prefill worker and are merged into the
decode worker's first response.

Failures. A failure of either leg before the decode worker's first response is booked against
the worker that failed (circuit breaker, health), the other leg is aborted, and the pair is tried
again without that worker, under the same retry settings as a regular request. Past the first
response, only a request whose client saw nothing (a one-shot answer) is opened again
(``after``: see ``Dispatcher.open_stream``); the prefill leg's later failures only count against
its worker. Closing the session (the answer ended, the client left, turnout matched a
stop string) aborts whatever is still running on either worker.

``n > 1``. A ``GenerateRequest`` carries one bootstrap room, and an SGLang worker expands
``n`` into ``n`` sequences that would share that room (SGLang's own PD fixes give each sequence
its room). So turnout sends one request per choice (``n = 1``, ``<id>-n<i>``), each on its own
pair with its own room, and merges their streams into one, choice ``i`` being index ``i``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Self

from turnout.deadlines import Deadlines
from turnout.routing.attempts import Attempt, Attempts, no_first_response, out_of_rotation
from turnout.routing.route import Route
from turnout.routing.session import ClosingSession, WorkerSession, record_failure
from turnout.routing.spans import end_attempt, start_attempt
from turnout.routing.types import RoutingRequest
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.workers.errors import NoWorkerAvailable, WorkerRequestError
from turnout.workers.roles import Role
from turnout.workers.worker import Worker

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from turnout.routing.dispatch import Dispatcher
    from turnout.workers.dp import Slot

log = logging.getLogger(__name__)

__all__ = ["ChoicesSession", "PairSession", "PrefillDecode", "draw_room"]

#: The call both legs make.
_RPC: Final = "Generate"
#: Bootstrap rooms are non-negative int32 values (``DisaggregatedParams.bootstrap_room``).
_ROOMS: Final = 2**31


def draw_room(rng: random.Random, dp_rank: int | None = None, dp_size: int = 1) -> int:
    """A random bootstrap room; with a prefill DP rank, one that SGLang maps to that rank
    (its prefill DP controller and the decode side both take ``room % dp_size``)."""
    if dp_rank is None or dp_size <= 1:
        return rng.randrange(_ROOMS)
    return rng.randrange(_ROOMS // dp_size) * dp_size + dp_rank


class _Leg(WorkerSession):
    """One half of a pair: a session that may fail before its first response."""

    __slots__ = ()
    failure_note = "(a prefill-decode leg)"


@dataclass(slots=True, frozen=True)
class _Try:
    """One attempt: the pair, each leg's request, and its time limits."""

    routes: dict[Role, Route]
    routing: RoutingRequest
    slots: dict[Role, Slot]
    requests: dict[Role, pb.GenerateRequest]
    #: Its number and time limits (``wait``: for the decode leg's first response).
    attempt: Attempt
    room: int


@dataclass(slots=True)
class _Failure:
    role: Role
    slot: Slot
    failure: WorkerRequestError
    exc: BaseException


class _Prefill:
    """The prefill leg and the task that reads it to its end (its first batch is kept: it
    holds the prompt logprobs)."""

    __slots__ = ("first", "leg", "seen", "task")

    def __init__(self, leg: _Leg) -> None:
        self.leg = leg
        self.first: list[Any] | None = None
        self.seen = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            batch = await self.leg.next_batch()
            self.first = batch
            self.seen.set()
            while batch:
                batch = await self.leg.next_batch()
        finally:
            self.seen.set()

    def failure(self) -> WorkerRequestError | None:
        """Its failure, once the task ended with one."""
        if not self.task.done() or self.task.cancelled():
            return None
        exc = self.task.exception()
        return exc if isinstance(exc, WorkerRequestError) else None

    async def aclose(self) -> None:
        """Stop reading (aborting the leg if it still runs)."""
        task = self.task
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
        await self.leg.aclose()


class PairSession(ClosingSession):
    """The answer of one request on a prefill-decode pair: the decode leg's responses (the
    first batch already received); the prefill leg is read to its end alongside."""

    __slots__ = ("_closed", "_decode", "_pending", "_prefill", "attempts", "meter", "room")

    def __init__(
        self, prefill: _Prefill, decode: _Leg, first: list[Any], attempts: int, room: int
    ) -> None:
        self._prefill = prefill
        self._decode = decode
        #: Responses received but not handed out yet (the first batch, to begin with).
        self._pending: deque[Any] = deque(first)
        self._closed = False
        #: Attempts (pairs tried) it took to get the first response.
        self.attempts = attempts
        #: The bootstrap room of the pair.
        self.room = room
        #: What observes the answer for the request (its metrics), set by whoever opened it.
        self.meter: Any = None

    @property
    def worker(self) -> Worker:
        """The decode worker (it writes the answer)."""
        return self._decode.worker

    @property
    def prefill_worker(self) -> Worker:
        """The prefill worker."""
        return self._prefill.leg.worker

    @property
    def done(self) -> bool:
        """True once the decode leg ended, failed or was closed."""
        return not self._pending and self._decode.done

    async def next_batch(self) -> list[Any]:
        """The decode leg's responses that arrived together; [] once it ended."""
        pending = self._pending
        if pending:
            batch = list(pending)
            pending.clear()
            return batch
        return await self._decode.next_batch()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        pending = self._pending
        if not pending:
            pending.extend(await self._decode.next_batch())
            if not pending:
                raise StopAsyncIteration
        return pending.popleft()

    async def merge_prompt_logprobs(self, deadline_at: float | None) -> None:
        """Copy the prefill leg's prompt logprobs into the decode leg's first response (SGLang's
        decode worker never computes them), waiting for the prefill leg's first batch."""
        prefill = self._prefill
        worker = self.prefill_worker
        loop = asyncio.get_running_loop()
        left = None if deadline_at is None else max(deadline_at - loop.time(), 0.0)
        try:
            async with asyncio.timeout(left):
                await prefill.seen.wait()
        except TimeoutError:
            raise WorkerRequestError(
                "the prefill worker did not send the prompt logprobs in time",
                status=504,
                worker_fault=True,
                detail=f"{worker.url}: no prompt logprobs before the deadline",
            ).on(worker.id, self.attempts) from None
        if prefill.first is None:
            failure = prefill.failure()
            if failure is not None:
                raise failure
            raise WorkerRequestError(
                "the prefill worker ended without the prompt logprobs",
                status=502,
                worker_fault=True,
            ).on(worker.id, self.attempts)
        logprobs = next(_prompt_logprobs(prefill.first), None)
        if logprobs is None or not self._pending:
            return
        head = getattr(self._pending[0], self._pending[0].WhichOneof("response") or "chunk")
        if not head.HasField("input_logprobs"):
            head.input_logprobs.CopyFrom(logprobs)

    async def aclose(self) -> None:
        """Close both legs (each aborted on its worker if it still runs)."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        try:
            await self._decode.aclose()
        finally:
            await self._prefill.aclose()

    def __del__(self) -> None:
        # Safety net: a session dropped without aclose() stops reading its prefill leg (the
        # legs' own safety nets release their workers).
        if not self._closed and not self._prefill.task.done():
            self._prefill.task.cancel()


class ChoicesSession(ClosingSession):
    """The ``n`` pairs of one request (one per choice) read as one stream: the responses of
    pair ``i`` are choice ``i``."""

    __slots__ = ("_closed", "_live", "_pending", "_reads", "meter", "pairs")

    def __init__(self, pairs: list[PairSession]) -> None:
        self.pairs = pairs
        #: What observes the answer for the request (its metrics), set by whoever opened it.
        self.meter: Any = None
        self._pending: deque[Any] = deque()
        self._live = set(range(len(pairs)))
        self._reads: dict[int, asyncio.Task[list[Any]]] = {}
        self._closed = False

    @property
    def worker(self) -> Worker:
        """The decode worker of the first choice."""
        return self.pairs[0].worker

    @property
    def attempts(self) -> int:
        """Most attempts any choice's pair took."""
        return max(pair.attempts for pair in self.pairs)

    @property
    def done(self) -> bool:
        """True once every pair ended."""
        return not self._live

    async def next_batch(self) -> list[Any]:
        """The responses of every pair that had some, waiting for one if none had; []
        once all pairs ended."""
        if self._pending:
            batch = list(self._pending)
            self._pending.clear()
            return batch
        loop = asyncio.get_running_loop()
        while self._live:
            reads = self._reads
            for index in self._live:
                if index not in reads:
                    reads[index] = loop.create_task(self.pairs[index].next_batch())
            await asyncio.wait(reads.values(), return_when=asyncio.FIRST_COMPLETED)
            found: list[Any] = []
            for index, read in list(reads.items()):
                if not read.done():
                    continue
                del reads[index]
                responses = read.result()
                if not responses:
                    self._live.discard(index)
                    continue
                for response in responses:
                    kind = response.WhichOneof("response")
                    if kind == "chunk":
                        response.chunk.index = index
                    elif kind == "complete":
                        response.complete.index = index
                found.extend(responses)
            if found:
                return found
        return []

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        pending = self._pending
        if not pending:
            pending.extend(await self.next_batch())
            if not pending:
                raise StopAsyncIteration
        return pending.popleft()

    async def aclose(self) -> None:
        """Close every pair."""
        if self._closed:
            return
        self._closed = True
        self._live.clear()
        self._pending.clear()
        reads = list(self._reads.values())
        self._reads.clear()
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
        for pair in self.pairs:
            await pair.aclose()


PdSession = PairSession | ChoicesSession


class PrefillDecode:
    """Opens requests of disaggregated models on prefill-decode pairs (see the module doc)."""

    def __init__(self, dispatcher: Dispatcher, rng: random.Random) -> None:
        self.dispatcher = dispatcher
        self.registry = dispatcher.registry
        self._rng = rng
        #: The waits for decode legs' first responses (cut short when a leg's worker leaves
        #: rotation: see ``Worker.veto``).
        self._first_responses = Deadlines()

    def pair_possible(self, model: str) -> bool:
        """Whether ``model`` has a routable prefill and a routable decode worker now."""
        registry = self.registry
        return any(w.routable for w in registry.role_workers(model, Role.PREFILL)) and any(
            w.routable for w in registry.role_workers(model, Role.DECODE)
        )

    async def open(
        self,
        model: str,
        routing: RoutingRequest,
        request: pb.GenerateRequest,
        deadline_at: float | None,
        after: WorkerRequestError | None = None,
    ) -> PdSession:
        """Start ``request`` on a pair (one pair per choice when ``n > 1``) and wait for the
        first response of each (``after``: as for ``Dispatcher.open_stream``)."""
        n = request.sampling_params.n
        if n <= 1:
            return await self._open_pair(model, routing, request, deadline_at, after)
        pairs = await _all_or_none(
            [
                self._open_pair(model, routing, _choice_request(request, i), deadline_at, after)
                for i in range(n)
            ]
        )
        return ChoicesSession(pairs)

    async def _open_pair(
        self,
        model: str,
        routing: RoutingRequest,
        request: pb.GenerateRequest,
        deadline_at: float | None,
        after: WorkerRequestError | None,
    ) -> PairSession:
        dispatcher = self.dispatcher
        registry = self.registry
        routes = {
            Role.PREFILL: dispatcher.role_route(model, Role.PREFILL),
            Role.DECODE: dispatcher.role_route(model, Role.DECODE),
        }
        attempts = dispatcher.attempts(deadline_at)
        tracing = dispatcher.tracing
        adapter = routing.adapter
        # Each worker mints its own ids for an adapter: a retry starts from the given one.
        default_lora_id = request.lora_id

        def left(role: Role) -> bool:
            return bool(registry.role_candidates(model, role, attempts.tried, adapter=adapter))

        if after is not None:
            await attempts.resume(after, lambda: left(Role.PREFILL) and left(Role.DECODE))

        while True:
            prefills = registry.role_candidates(
                model, Role.PREFILL, attempts.tried, adapter=adapter
            )
            decodes = registry.role_candidates(
                model, Role.DECODE, attempts.tried, ranks=False, adapter=adapter
            )
            if not prefills or not decodes:
                raise self._no_pair(model, attempts, adapter)
            prefill_slot = routes[Role.PREFILL].select(routing, prefills, tracing)
            decode_slot = routes[Role.DECODE].select(routing, decodes, tracing)
            attempt = attempts.next()
            room = self._bootstrap(request, prefill_slot)
            decode_request = request
            # The decode leg lets its scheduler pick the rank; each leg names the LoRA adapter
            # by its own worker's lora_id.
            if prefill_slot.dp_rank is not None or adapter is not None:
                decode_request = pb.GenerateRequest()
                decode_request.CopyFrom(request)
            prefill_slot.pin(request)
            decode_slot.pin(decode_request)
            if adapter is not None:
                prefill_slot.worker.pin_adapter(request, adapter, default_lora_id)
                decode_slot.worker.pin_adapter(decode_request, adapter, default_lora_id)
            outcome = await self._attempt(
                _Try(
                    routes,
                    routing,
                    {Role.PREFILL: prefill_slot, Role.DECODE: decode_slot},
                    {Role.PREFILL: request, Role.DECODE: decode_request},
                    attempt,
                    room,
                )
            )
            if isinstance(outcome, PairSession):
                if _wants_prompt_logprobs(request):
                    try:
                        await outcome.merge_prompt_logprobs(deadline_at)
                    except BaseException:
                        await outcome.aclose()
                        raise
                return outcome
            # The attempt failed before the first response: retry the pair without the worker
            # that failed, as a regular request is retried without its worker.
            failures = outcome
            failed_ids = [f.slot.worker.id for f in failures]
            if all(f.failure.refused for f in failures) and attempts.resend(failed_ids):
                log.info(
                    "prefill-decode attempt %d refused by %s, sending it again",
                    attempt.number,
                    ", ".join(failed_ids),
                )
                continue
            delay = attempts.failed(
                failed_ids,
                all(f.failure.retryable for f in failures),
                lambda: left(Role.PREFILL) and left(Role.DECODE),
            )
            for f in failures:
                level = logging.WARNING if f.failure.worker_fault else logging.INFO
                log.log(
                    level,
                    "%s worker %s failed prefill-decode attempt %d (%s): %s",
                    f.role.value,
                    f.slot.worker.id,
                    attempt.number,
                    "retrying on another pair" if delay is not None else "giving up",
                    f.failure.detail,
                )
            if delay is not None:
                await asyncio.sleep(delay)
                continue
            exhausted = [role.value for role in (Role.PREFILL, Role.DECODE) if not left(role)]
            first = failures[0]
            raise attempts.give_up(first.failure, first.slot.worker.id, exhausted) from first.exc

    def _bootstrap(self, request: pb.GenerateRequest, prefill: Slot) -> int:
        """Set the request's rendezvous with the ``prefill`` slot; returns the room."""
        worker = prefill.worker
        room = draw_room(self._rng, prefill.dp_rank, worker.dp_size)
        params = request.disaggregated_params
        params.bootstrap_host = worker.bootstrap_host
        params.bootstrap_port = worker.bootstrap_port
        params.bootstrap_room = room
        return room

    async def _attempt(self, pair: _Try) -> PairSession | list[_Failure]:
        """Start both legs and wait for the decode leg's first response: the pair's session, or
        the failures of the legs that failed (the other leg is closed, hence aborted)."""
        prefill_leg = self._start(Role.PREFILL, pair)
        if isinstance(prefill_leg, _Failure):
            return [prefill_leg]
        reader = _Prefill(prefill_leg)
        decode_leg = self._start(Role.DECODE, pair)
        if isinstance(decode_leg, _Failure):
            await reader.aclose()
            return [decode_leg]
        first_read = asyncio.get_running_loop().create_task(decode_leg.next_batch())
        try:
            failures = await self._first_response(reader, decode_leg, first_read, pair.attempt.wait)
        except BaseException:
            first_read.cancel()
            with contextlib.suppress(BaseException):
                await first_read
            await decode_leg.aclose()
            await reader.aclose()
            raise
        if not failures:
            return PairSession(
                reader, decode_leg, first_read.result(), pair.attempt.number, pair.room
            )
        if not first_read.done():
            first_read.cancel()
        with contextlib.suppress(BaseException):
            await first_read
        await decode_leg.aclose()
        await reader.aclose()
        return failures

    async def _first_response(
        self,
        reader: _Prefill,
        decode_leg: _Leg,
        first_read: asyncio.Task[list[Any]],
        wait: float | None,
    ) -> list[_Failure]:
        """Wait for the decode leg's first batch, watching the prefill leg; [] when it came."""
        pending: set[asyncio.Task[Any]] = {reader.task, first_read}
        loop = asyncio.get_running_loop()
        first_wait = self._first_responses.at(math.inf if wait is None else loop.time() + wait)
        legs = ((Role.DECODE, decode_leg), (Role.PREFILL, reader.leg))
        for _, leg in legs:
            leg.worker.first_waits[first_wait] = None
        try:
            with first_wait:
                while True:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                    failures = []
                    if reader.task.done():
                        pending.discard(reader.task)
                        failure = reader.failure()
                        if failure is not None:
                            failures.append(self._failed(Role.PREFILL, reader.leg, failure))
                        elif not reader.task.cancelled() and reader.task.exception():
                            raise reader.task.exception()  # type: ignore[misc]
                    if first_read.done():
                        decode_failure = self._decode_outcome(decode_leg, first_read)
                        if decode_failure is not None:
                            failures.append(decode_failure)
                        elif not failures:
                            return []
                    if failures:
                        return failures
        except TimeoutError:
            out = [(role, leg) for role, leg in legs if leg.worker.vetoed is not None]
            if out:  # a leg's worker left rotation (wedged, stopped) meanwhile
                failures = []
                for role, leg in out:
                    failure = out_of_rotation(leg.worker, leg.worker.vetoed or "", _RPC)
                    record_failure(leg.worker, failure)
                    failures.append(_Failure(role, leg.slot, failure, TimeoutError(failure.detail)))
                return failures
            # Nothing from the decode leg in time. The decode worker waits for the prefill
            # worker's KV; a prefill leg that has not answered either is as silent.
            waited = wait or 0.0
            silent = [(Role.DECODE, decode_leg)]
            if not reader.task.done():
                silent.append((Role.PREFILL, reader.leg))
            failures = []
            for role, leg in silent:
                failure = no_first_response(leg.worker, waited, _RPC)
                record_failure(leg.worker, failure)
                failures.append(_Failure(role, leg.slot, failure, TimeoutError(failure.detail)))
            return failures
        finally:
            for _, leg in legs:
                leg.worker.first_waits.pop(first_wait, None)

    def _decode_outcome(
        self, decode_leg: _Leg, first_read: asyncio.Task[list[Any]]
    ) -> _Failure | None:
        if first_read.cancelled():
            raise asyncio.CancelledError
        exc = first_read.exception()
        if exc is not None:
            if isinstance(exc, WorkerRequestError):
                return self._failed(Role.DECODE, decode_leg, exc)
            raise exc
        if first_read.result():
            return None
        failure = no_first_response(decode_leg.worker)
        record_failure(decode_leg.worker, failure)
        return _Failure(Role.DECODE, decode_leg.slot, failure, RuntimeError(failure.detail))

    @staticmethod
    def _failed(role: Role, leg: _Leg, failure: WorkerRequestError) -> _Failure:
        cause = failure.__cause__ or failure
        return _Failure(role, leg.slot, failure, cause)

    def _start(self, role: Role, pair: _Try) -> _Leg | _Failure:
        """Start the ``Generate`` call of ``role``'s leg."""
        slot = pair.slots[role]
        worker = slot.worker
        tracing = self.dispatcher.tracing
        span: Span | None = None
        metadata: Sequence[tuple[str, str]] = ()
        if tracing is not None:
            span, metadata = start_attempt(tracing, slot, pair.attempt.number, _RPC, role.value)
        slot.acquire()
        try:
            stream = worker.connection.generate(
                pair.requests[role], pair.attempt.remaining, metadata
            )
        except Exception as exc:
            slot.release()
            failure = worker.connection.classify(exc)
            if span is not None:
                end_attempt(span, failure, exc=exc)
            if failure is None:
                raise
            record_failure(worker, failure)
            return _Failure(role, slot, failure, exc)
        return _Leg(
            slot,
            stream,
            [],
            pair.routes[role],
            pair.routing,
            pair.attempt.number,
            span,
        )

    def _no_pair(
        self, model: str, attempts: Attempts, adapter: str | None = None
    ) -> NoWorkerAvailable:
        missing = [
            role.value
            for role in (Role.PREFILL, Role.DECODE)
            if not self.registry.role_candidates(
                model, role, attempts.tried, ranks=False, adapter=adapter
            )
        ]
        parts = [f"no {' and no '.join(missing)} worker can take the request"]
        for role in (Role.PREFILL, Role.DECODE):
            workers = self.registry.role_workers(model, role)
            summary = attempts.describe(workers, adapter)
            parts.append(f"{len(workers)} {role.value} worker(s){': ' if summary else ''}{summary}")
        return NoWorkerAvailable(model, "; ".join(parts))


def _choice_request(request: pb.GenerateRequest, index: int) -> pb.GenerateRequest:
    """Choice ``index`` of ``request`` as a request of its own (``n = 1``)."""
    single = pb.GenerateRequest()
    single.CopyFrom(request)
    single.request_id = f"{request.request_id}-n{index}"
    single.sampling_params.n = 1
    return single


def _wants_prompt_logprobs(request: pb.GenerateRequest) -> bool:
    return request.return_logprob and request.logprob_start_len >= 0


def _prompt_logprobs(batch: list[Any]) -> Any:
    for response in batch:
        kind = response.WhichOneof("response")
        if kind is not None:
            message = getattr(response, kind)
            if message.HasField("input_logprobs"):
                yield message.input_logprobs


async def _all_or_none(openers: list[Coroutine[Any, Any, PairSession]]) -> list[PairSession]:
    """Open every pair concurrently; when one fails (or the caller is cancelled), the others
    are cancelled or closed before the error goes on."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(opener) for opener in openers]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except BaseException:
        await _discard(tasks)
        raise
    failed = next((t for t in tasks if t.done() and t.exception() is not None), None)
    if failed is not None:
        await _discard(tasks)
        exc = failed.exception()
        assert exc is not None
        raise exc
    return [task.result() for task in tasks]


async def _discard(tasks: list[asyncio.Task[PairSession]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is None:
            await task.result().aclose()
