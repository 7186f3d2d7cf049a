"""The attempts of one request: the one retry rule both dispatchers follow.

A request is tried on one worker (or prefill-decode pair) after another until one answers. An
attempt that failed before the client saw anything is booked here: the workers that failed are
not offered again, and another attempt follows while the retry budget, the request's deadline
(the back-off must end before it) and the candidates allow. A refused attempt (nothing ran: a
graceful GOAWAY) is sent again at once, once per worker, and not counted against the budget.
The error the client gets at the end says how many attempts it took.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from math import inf

from turnout.workers.errors import WorkerRequestError
from turnout.workers.retry import backoff_delay
from turnout.workers.settings import RetrySettings
from turnout.workers.worker import Worker, WorkerState

__all__ = ["Attempt", "Attempts", "no_first_response", "out_of_rotation"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt's number and time limits."""

    #: 1 for the first attempt.
    number: int
    #: Seconds left of the request's deadline (None: no deadline).
    remaining: float | None
    #: Seconds the first response may take (None: no bound).
    wait: float | None


class Attempts:
    """The attempt counter, the workers tried and refused, the retry budget, the back-off and
    the final error of one request (see the module doc)."""

    __slots__ = (
        "_budget",
        "_deadline_at",
        "_first_timeout",
        "_loop",
        "_retry",
        "_rng",
        "number",
        "refused",
        "retryable",
        "tried",
    )

    def __init__(
        self,
        retry: RetrySettings,
        rng: random.Random,
        deadline_at: float | None,
        first_response_timeout: float | None = None,
    ) -> None:
        self._retry = retry
        self._rng = rng
        self._budget = retry.max_attempts if retry.enabled else 1
        self._loop = asyncio.get_running_loop()
        self._deadline_at = deadline_at
        self._first_timeout = first_response_timeout
        #: Attempts started.
        self.number = 0
        #: Ids of the workers that failed this request (not offered again).
        self.tried: set[str] = set()
        #: Ids of the workers that refused it (each is sent it again once).
        self.refused: set[str] = set()
        #: Whether the last failure could succeed elsewhere.
        self.retryable = True

    def next(self) -> Attempt:
        """Start the next attempt."""
        self.number += 1
        remaining = None
        if self._deadline_at is not None:
            remaining = max(self._deadline_at - self._loop.time(), 0.001)
        first = self._first_timeout
        wait = remaining if first is None else min(remaining or inf, first)
        return Attempt(self.number, remaining, wait)

    def resend(self, worker_ids: Iterable[str]) -> bool:
        """Whether an attempt the workers ``worker_ids`` refused is sent again at once: yes
        unless one of them refused it before (each worker once)."""
        ids = set(worker_ids)
        if ids & self.refused:
            return False
        self.refused |= ids
        return True

    def failed(
        self, worker_ids: Iterable[str], retryable: bool, others_left: Callable[[], bool]
    ) -> float | None:
        """Book the failure of the current attempt on ``worker_ids``: the seconds to back off
        before the next attempt, or None when this was the last (the budget is spent, the
        failure is not ``retryable``, the back-off would outlast the deadline, or no other
        candidate is left: ``others_left()``, asked last)."""
        self.tried.update(worker_ids)
        self.retryable = retryable
        if self.number - len(self.refused) >= self._budget or not retryable:
            return None
        delay = backoff_delay(self._retry, self.number - 1, self._rng)
        deadline_at = self._deadline_at
        if deadline_at is not None and self._loop.time() + delay >= deadline_at:
            return None
        return delay if others_left() else None

    async def resume(self, failure: WorkerRequestError, others_left: Callable[[], bool]) -> None:
        """Go on after ``failure``: the attempt that failed after its worker had started
        answering (a one-shot answer started over, or a stream moved to another worker), booked
        as a failure before the first response is (its worker left out, the budget, the
        back-off). Raises the error the client gets when no attempt follows."""
        self.number = failure.attempts
        worker_id = failure.worker_id or ""
        delay = self.failed([worker_id], failure.retryable, others_left)
        log.warning(
            "worker %s failed attempt %d after it started answering (%s): %s",
            worker_id,
            self.number,
            "retrying on another worker" if delay is not None else "giving up",
            failure.detail,
        )
        if delay is None:
            raise self.give_up(failure, worker_id)
        await asyncio.sleep(delay)

    def give_up(
        self, failure: WorkerRequestError, worker_id: str, exhausted: Sequence[str] = ()
    ) -> WorkerRequestError:
        """The error the client gets once no attempt follows: ``failure`` of ``worker_id``,
        saying how many attempts it took and, for a retryable failure, which kinds of worker
        (``exhausted``: e.g. ``prefill``) had no candidate left."""
        if self.number > 1:
            failure.message = f"{failure.message} (after {self.number} attempts)"
        if exhausted and self.retryable:
            failure.message = f"{failure.message}; no other {' or '.join(exhausted)} worker is left"
        return failure.on(worker_id, self.number)

    def describe(self, workers: Sequence[Worker], adapter: str | None = None) -> str:
        """Why none of ``workers`` can take the request: how many are in which state."""
        states: dict[str, int] = {}
        for w in workers:
            if adapter is not None and not w.has_adapter(adapter):
                label = f"without LoRA adapter {adapter!r}"
            elif w.id in self.tried:
                label = "failed for this request"
            elif w.state is WorkerState.READY and not w.breaker.allows():
                label = "circuit open"
            else:
                label = w.state.value
            states[label] = states.get(label, 0) + 1
        return ", ".join(f"{n} {label}" for label, n in sorted(states.items()))


def no_first_response(
    worker: Worker, waited: float | None = None, rpc: str = "Generate"
) -> WorkerRequestError:
    """The failure of a worker that sent no first response: it ended the call without one, or
    (``waited`` given) did not send one within ``waited`` seconds (hung, stopped, overloaded)."""
    if waited is None:
        return WorkerRequestError(
            "the worker ended the request without answering",
            status=502,
            worker_fault=True,
            retryable=True,
            detail=f"{worker.url}: {rpc} ended without a response",
        )
    return WorkerRequestError(
        f"the worker did not start answering within {waited:g}s",
        status=504,
        worker_fault=True,
        retryable=True,
        detail=f"{worker.url}: no response to {rpc} within {waited:g}s (aborted)",
    )


def out_of_rotation(worker: Worker, reason: str, rpc: str = "Generate") -> WorkerRequestError:
    """The failure of a worker that left rotation (wedged, stopped: ``reason``) while a
    request waited for its first response: retried elsewhere."""
    return WorkerRequestError(
        "the worker stopped answering",
        status=503,
        worker_fault=True,
        retryable=True,
        detail=f"{worker.url}: no response to {rpc}; out of rotation: {reason} (aborted)",
    )
