"""Failover of a running answer: when its worker fails after the first token, the rest of the
answer is asked of another worker, and the client's answer goes on as if one worker had given it.

The continuation's input is the prompt's token ids and the ids generated so far; its token limit
(and minimum) shrinks by what was generated; its sampling is the same, a seed advanced by the
tokens generated (a seeded request stays reproducible); its adapter is the request's. The same
dispatcher places it, the failed worker left out (``Opener``'s ``after``). The choice processors
(stop strings, parsers, detokenizer) live in the router and simply read on; the token counts
are those of one answer (see :class:`~turnout.generation.pipeline.SessionEvents`).

An answer of several choices (``n > 1``, one worker request) goes on as one request per choice
not ended yet, each from its own context, read together (:class:`~turnout.generation.fan_in.
FanInSession`). A sampled choice continues with the same parameters; only a greedy or seeded
engine makes it the very text the first worker would have written.

What cannot move is refused and ends as before (the error): a grammar-constrained request (the
grammar's state is the worker's; ``json_schema``, ``regex``, ``ebnf``, ``structural_tag``, a
required or named ``tool_choice``).
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING

from turnout.errors import ApiError
from turnout.generation.fan_in import FanInSession
from turnout.generation.plan import Plan
from turnout.observability.metrics import note_migration
from turnout.routing.types import RoutingRequest
from turnout.wire.proto import sglang_scheduler_pb2 as pb
from turnout.workers.errors import WorkerRequestError

if TYPE_CHECKING:
    from turnout.generation.pipeline import GenerateSession, Opener, SessionEvents

__all__ = ["Migration", "refusal"]

log = logging.getLogger(__name__)


def refusal(plan: Plan) -> str | None:
    """Why an answer of ``plan`` cannot move to another worker (None: it can)."""
    if plan.constraint is not None:
        return f"constrained ({plan.constraint.kind})"
    return None


class Migration:
    """What one prompt's answer needs to go on elsewhere: its request, the token ids generated
    so far (kept by the event source while the answer may move) and the migrations left."""

    __slots__ = (
        "_left",
        "_lora_id",
        "_model",
        "_moved",
        "_open",
        "_refused",
        "_request",
        "_restarts",
        "_routing",
        "generated",
        "on_move",
    )

    def __init__(
        self,
        opener: Opener,
        plan: Plan,
        routing: RoutingRequest,
        request: pb.GenerateRequest,
        attempts: int,
    ) -> None:
        """``attempts``: migrations the request may make; ``request``: the prompt's worker
        request (as the dispatcher left it)."""
        refused = refusal(plan)
        self._open = opener
        self._model = plan.model_id
        #: The configured ``lora_id`` (the dispatcher names the new worker's own).
        self._lora_id = plan.lora_id
        self._routing = routing
        self._request = request
        self._left = attempts
        self._refused = refused
        #: A one-shot answer showed the client nothing: one that cannot move starts over
        #: instead (the flow's retry), which is no refusal.
        self._restarts = not plan.stream
        #: Each choice's ids generated so far (arrays: not tracked by the garbage collector);
        #: None when the answer cannot move.
        self.generated: list[array[int]] | None = (
            [array("I") for _ in range(plan.n)] if refused is None else None
        )
        #: Per choice, the tokens generated before its current session.
        self._moved = array("q", bytes(8 * plan.n))
        #: Told of each move: (failed worker, new worker, tokens moved, reason).
        self.on_move: Callable[[str, str, int, str], None] | None = None

    async def resume(self, source: SessionEvents, failure: WorkerRequestError) -> bool:
        """Go on after ``failure`` of ``source``'s session: True once the rest of the answer
        streams from another worker (``source`` reads it), False when it does not (the failure
        stands)."""
        worker = failure.worker_id
        if not (failure.worker_fault and failure.retryable) or worker is None:
            return False
        reason = _reason(failure)
        generated = self.generated
        if generated is None and self._restarts:
            return False
        if generated is None or self._left <= 0:
            outcome = "refused" if generated is None else "exhausted"
            note_migration(reason, outcome)
            log.warning(
                "worker %s failed request %s after its first token (%s); not migrated: %s",
                worker,
                self._request.request_id,
                reason,
                self._refused or "no migration left",
            )
            return False
        current = source.session
        fan_in = current if isinstance(current, FanInSession) else None
        if fan_in is not None and fan_in.failed is not None:
            # One choice's session of several failed: only that choice moves.
            choices = [c for c in (fan_in.failed,) if c in source.open_choices()]
        else:
            fan_in = None
            choices = source.open_choices()
        requests = [self._continuation(generated, choice) for choice in choices]
        moved = sum(len(generated[choice]) for choice in choices)
        if not choices or any(request is None for request in requests):
            note_migration(reason, "exhausted")
            return False
        self._left -= 1
        sessions: list[GenerateSession] = []
        try:
            for request in requests:
                assert request is not None
                sessions.append(await self._open(self._model, self._routing, request, failure))
        except ApiError as exc:
            # Often ``failure`` itself (the dispatcher gives it up): its traceback would hold
            # this frame, which holds it, a cycle; the caller raises it again anyway.
            exc.__traceback__ = None
            for opened in sessions:
                await opened.aclose()
            note_migration(reason, "failed")
            log.warning(
                "worker %s failed request %s after %d tokens (%s); migration failed: %s",
                worker,
                self._request.request_id,
                moved,
                reason,
                exc.message,
            )
            return False
        if fan_in is not None:
            await fan_in.replace(choices[0], sessions[0])
            session: GenerateSession = fan_in
        else:
            await current.aclose()
            session = sessions[0] if len(sessions) == 1 else FanInSession(sessions, choices)
        for choice in choices:
            self._moved[choice] = len(generated[choice])
        source.continue_on(session, self._moved, choices)
        note_migration(reason, "migrated")
        target = ",".join(str(getattr(getattr(s, "worker", None), "id", "?")) for s in sessions)
        log.warning(
            "migrated request %s from worker %s to worker %s after %d tokens (%s)",
            self._request.request_id,
            worker,
            target,
            moved,
            reason,
        )
        if self.on_move is not None:
            self.on_move(worker, target, moved, reason)
        return True

    def _continuation(self, generated: list[array[int]], choice: int) -> pb.GenerateRequest | None:
        """The request for the rest of choice ``choice`` (None: nothing is left to generate)."""
        original = self._request
        ids = generated[choice]
        done = len(ids)
        params = original.sampling_params
        if params.HasField("max_new_tokens") and params.max_new_tokens - done <= 0:
            return None
        request = pb.GenerateRequest()
        request.CopyFrom(original)
        several = len(generated) > 1
        request.request_id = (
            f"{original.request_id}-c{choice}-m{done}"
            if several
            else f"{original.request_id}-m{done}"
        )
        request.lora_id = self._lora_id
        if several:
            request.sampling_params.n = 1
        tokenized = request.tokenized
        tokenized.input_ids.extend(ids)
        tokenized.original_text = ""  # the ids say more now
        request.logprob_start_len = -1  # the prompt's logprobs came with the first answer
        params = request.sampling_params
        if params.HasField("max_new_tokens"):
            params.max_new_tokens -= done
        params.min_new_tokens = max(params.min_new_tokens - done, 0)
        seed = params.custom_params.fields.get("seed")
        if seed is not None and seed.HasField("number_value"):
            params.custom_params["seed"] = seed.number_value + done
        return request


def _reason(failure: WorkerRequestError) -> str:
    """The failure, as a bounded label: the worker's gRPC status name, or ``worker_failed``."""
    code = getattr(failure.__cause__, "code", None)
    name = getattr(code, "name", None)
    return name.lower() if isinstance(name, str) else "worker_failed"
