"""A request's session on one worker: its responses as they come, and its bookkeeping (the
slot in flight, the circuit breaker, the policy's done hook, the attempt's span) when it ends."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self

from turnout.routing.route import Route
from turnout.routing.spans import end_attempt
from turnout.routing.types import RoutingRequest
from turnout.workers.connection import ResponseStream
from turnout.workers.dp import Slot
from turnout.workers.errors import WorkerRequestError
from turnout.workers.worker import Worker

if TYPE_CHECKING:
    from opentelemetry.trace import Span

__all__ = ["ClosingSession", "WorkerSession", "record_failure"]

log = logging.getLogger(__name__)


class ClosingSession:
    """A session usable as ``async with``: leaving the block calls :meth:`aclose`."""

    __slots__ = ()

    async def aclose(self) -> None:
        """Stop the session and release what it holds."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class WorkerSession(ClosingSession):
    """The responses of one request on one worker (the first ones included).

    Read it batch by batch (:meth:`next_batch`: every response that arrived together) or
    response by response (``async for``). Counts as in flight on ``worker`` until it ends or
    :meth:`aclose` is called; records the outcome into the worker's circuit breaker. Errors
    after the first response raise :class:`WorkerRequestError`: a client that has seen output
    cannot be answered again, one that has not may be (``Dispatcher.open_stream(after=...)``).
    """

    #: How a failure after the first response is logged.
    failure_note: ClassVar[str] = "after its first response"

    __slots__ = (
        "__weakref__",
        "_cut",
        "_done",
        "_health",
        "_pending",
        "_route",
        "_routing",
        "_span",
        "_stream",
        "attempts",
        "heard",
        "meter",
        "slot",
        "worker",
    )

    def __init__(  # noqa: PLR0917 - built by the dispatchers only
        self,
        slot: Slot,
        stream: ResponseStream,
        first: list[Any],
        route: Route,
        routing: RoutingRequest,
        attempts: int,
        span: Span | None = None,
    ) -> None:
        #: The attempt's span (tracing on): it lasts as long as the worker's call.
        self._span = span
        #: Where the request runs: the worker, or one of its DP ranks.
        self.slot = slot
        self.worker = slot.worker
        self._stream = stream
        #: Responses received but not handed out yet (the first batch, to begin with); None
        #: once handed out, so that a waiting stream keeps no container of its own.
        self._pending: list[Any] | None = first
        self._route = route
        #: What the policy's done hook is told (only kept for one).
        self._routing = routing if route.wants_outcomes else None
        self._done = False
        #: Attempts it took to get the first response (1 = no retry).
        self.attempts = attempts
        #: What observes this stream for the request (its metrics), set by whoever opened it;
        #: the generation pipeline feeds it as it reads the responses.
        self.meter: Any = None
        self._health = self.worker.health
        #: Why it was cut (its worker left rotation while it was silent), or None.
        self._cut: str | None = None
        #: A response arrived since the worker last looked (``Worker.cut_silent``).
        self.heard = True
        if stream.finished:
            self._finish(None)
        else:
            self.worker.running.add(self)

    @property
    def done(self) -> bool:
        """True once the stream ended, failed or was closed."""
        return self._done

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        pending = self._pending
        if not pending:
            pending = self._pending = await self.next_batch()
            if not pending:
                raise StopAsyncIteration
        return pending.pop(0)  # a batch is short

    async def next_batch(self) -> list[Any]:
        """The responses not handed out yet, waiting for some if there are none; an empty
        list once the stream ended."""
        pending = self._pending
        if pending is not None:
            self._pending = None
            if pending:
                return pending
        if self._done:
            return []
        # The worker's read is awaited here, not in a helper coroutine: one coroutine fewer
        # per stream step.
        try:
            batch = await self._stream.next_batch()
        except asyncio.CancelledError:
            # Cancelled while waiting on the worker (client gone, request timeout): that says
            # nothing good about the worker, so it is not booked as a success.
            if not self._done:
                self._finish(None, neutral=True)
                await self._stream.aclose()
            raise
        except Exception as exc:
            failure = self.worker.connection.classify(exc)
            if failure is None:
                self._finish(None)
                raise
            self._finish(failure)
            log.warning(
                "worker %s failed %s: %s", self.worker.id, self.failure_note, failure.detail
            )
            try:
                raise failure.on(self.worker.id, self.attempts) from exc
            finally:
                # The frame outlives the coroutine in the error's traceback: a local holding the
                # error would make a reference cycle of them.
                del failure
        if not batch:
            if self._cut is not None:
                raise self._cut_failure() from None
            self._finish(None)
            return batch
        self.heard = True
        self._health.traffic_ok()
        if self._stream.finished:
            # Every choice completed: the worker is done even if nobody reads the stream's end.
            self._finish(None)
        return batch

    def cut(self, reason: str) -> None:
        """End the stream as failed by its worker, which left rotation (``reason``) while the
        stream was silent: the read in progress raises the failure (the answer moves on)."""
        if not self._done and self._cut is None:
            self._cut = reason
            self._stream.cancel(f"worker out of rotation: {reason}")

    def _cut_failure(self) -> WorkerRequestError:
        reason = self._cut or "out of rotation"
        failure = WorkerRequestError(
            "the worker stopped answering",
            status=503,
            worker_fault=True,
            retryable=True,
            detail=f"{self.worker.url}: silent while out of rotation: {reason} (cut)",
        )
        self._finish(failure)
        log.warning("worker %s failed %s: %s", self.worker.id, self.failure_note, failure.detail)
        return failure.on(self.worker.id, self.attempts)

    async def aclose(self) -> None:
        """Stop: cancel the gRPC call (the worker aborts the request) and release the worker."""
        if not self._done:
            self._finish(None)
            await self._stream.aclose()

    def _finish(self, failure: WorkerRequestError | None, *, neutral: bool = False) -> None:
        if self._done:
            return
        self._done = True
        worker = self.worker
        worker.running.discard(self)
        self.slot.release()
        if failure is not None:
            record_failure(worker, failure)
        elif not neutral:
            worker.breaker.record_success()
        self._route.done(self._routing, self.slot.id, failure is None)
        if self._span is not None:
            end_attempt(self._span, failure, cancelled=neutral)

    def __del__(self) -> None:
        # Safety net: a session dropped without aclose() must not stay "in flight" forever.
        if not self._done:
            self._done = True
            self.worker.running.discard(self)
            self.slot.release()
            if self._span is not None:
                end_attempt(self._span, None, cancelled=True)


def record_failure(worker: Worker, failure: WorkerRequestError) -> None:
    """Book ``failure`` against ``worker``: its last error and, for a worker fault, its
    failure count, circuit breaker and health (probed again at once)."""
    worker.last_error = failure.detail
    if failure.worker_fault:
        worker.failures_total += 1
        worker.breaker.record_failure()
        worker.health.traffic_fault()
        worker.wake.set()  # probe it now rather than at the next interval
