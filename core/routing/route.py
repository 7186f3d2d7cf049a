"""A model's (or a role's) policy as the dispatchers use it: its optional hooks looked up
once, and a selection that survives a faulty policy."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from turnout.routing.spans import select_span
from turnout.routing.types import (
    Candidate,
    Policy,
    RoutingRequest,
    WatchesOutcomes,
    WatchesWorkers,
)
from turnout.workers.dp import DpRank, Slot
from turnout.workers.worker import Worker

if TYPE_CHECKING:
    from turnout.observability.otel import Tracing

__all__ = ["Route"]

log = logging.getLogger(__name__)


class Route:
    """A policy, and which of its optional hooks it has (looked up once)."""

    __slots__ = ("_changed", "_done", "policy")

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self._done = policy if isinstance(policy, WatchesOutcomes) else None
        self._changed = policy if isinstance(policy, WatchesWorkers) else None

    @property
    def wants_outcomes(self) -> bool:
        """Whether the policy is told how requests ended (keep the routing facts for it)."""
        return self._done is not None

    def select(
        self, routing: RoutingRequest, candidates: list[Slot], tracing: Tracing | None = None
    ) -> Slot:
        """The policy's choice among ``candidates`` (never empty); the least-loaded one when
        the policy fails or chooses something else. In a span when ``tracing`` is on."""
        if tracing is None:
            return self._select(routing, candidates)
        span = select_span(tracing, self.policy, candidates)
        try:
            slot = self._select(routing, candidates)
        except BaseException as exc:
            tracing.end(span, f"{type(exc).__name__}: {exc}")
            raise
        tracing.end(
            span, attributes={"turnout.worker.id": slot.id, "turnout.worker.load": slot.load}
        )
        return slot

    def _select(self, routing: RoutingRequest, candidates: list[Slot]) -> Slot:
        try:
            chosen: Candidate = self.policy.select(routing, candidates)
        except Exception:
            log.exception("policy %s failed; using the least-loaded worker", self.policy)
            return min(candidates, key=lambda w: w.load)
        if isinstance(chosen, (Worker, DpRank)):
            return chosen
        for slot in candidates:  # a policy may return a wrapper; match it by id
            if slot.id == chosen.id:
                return slot
        log.error("policy %s chose a non-candidate %r", self.policy, chosen.id)
        return min(candidates, key=lambda w: w.load)

    def workers_changed(self, ids: Sequence[str]) -> None:
        """Tell the policy its candidates (when it watches them)."""
        if self._changed is not None:
            self._changed.on_workers_changed(ids)

    def done(self, routing: RoutingRequest | None, slot_id: str, ok: bool) -> None:
        """Tell the policy a request it routed ended (when it watches outcomes); a failing
        hook is logged, never raised."""
        if self._done is None or routing is None:
            return
        try:
            self._done.on_request_done(routing, slot_id, ok)
        except Exception:
            log.exception("policy on_request_done hook failed")
