"""Background responses: ``background: true`` on ``POST /v1/responses``.

A background request is checked and prepared (its prompt built) when it is submitted, so that
a bad request is still a 400; it is then stored with ``status: queued`` and answered at once,
and runs later in a task of its own on the one generation flow (the same dispatcher, token
reservations and metrics as a foreground request), under the tenant that submitted it. Its
admission by the gate (draining, the tenant's requests per minute and concurrent requests) is
the submission's: the tenant's concurrency slot is handed over to the response and held until
it ends, and its tokens are reserved when it reaches a worker.

At most ``max_running`` run at once and ``max_queued`` more wait (a 429 past that). The stored
response goes ``queued`` → ``in_progress`` → ``completed`` / ``incomplete`` / ``failed`` /
``cancelled`` through the response store's public methods. Its stream events are kept (in this
process, bounded in bytes) while the response is, for ``GET …?stream=true&starting_after=N``.
A cancel aborts the response on its worker; at shutdown the running ones end as ``failed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec

from turnout.admission.context import current_ticket, ticket_scope
from turnout.admission.ticket import Ticket
from turnout.config import BackgroundConfig
from turnout.errors import ApiError
from turnout.generation.context import RequestContext
from turnout.generation.flow import Backend, Endpoint, Streamed, prepare, run_plan
from turnout.generation.plan import Plan
from turnout.responses.endpoint import ResponsesApi
from turnout.responses.event_log import EventLog
from turnout.responses.request import ResponsesRequest
from turnout.responses.store import ResponseStore, StoredResponse
from turnout.tenants import Admission, current_admission, current_tenant
from turnout.tenants.context import admission_scope, tenant_scope
from turnout.tenants.table import Tenant

log = logging.getLogger(__name__)

#: Statuses a response ends with.
FINISHED = frozenset({"completed", "incomplete", "failed", "cancelled"})
#: Longest wait for a cancelled background response to wind down (its abort, its store).
CANCEL_WAIT_S = 5.0
#: The event logs of ended responses kept at most (however small).
MAX_ENDED_LOGS = 100_000


class BackgroundQueueFull(ApiError):
    """429: every background slot runs and the queue is full."""

    def __init__(self, running: int, queued: int) -> None:
        super().__init__(
            429,
            f"too many background responses: {running} running and {queued} waiting; retry later",
            code="background_queue_full",
            headers={"retry-after": "1"},
        )


class BackgroundClosed(ApiError):
    """503: the router is shutting down and runs no more background responses."""

    def __init__(self) -> None:
        super().__init__(503, "turnout is shutting down", code="shutting_down")


@dataclass(slots=True)
class _Job:
    """A background response waiting or running."""

    stored: StoredResponse
    request: ResponsesRequest
    plan: Plan
    ctx: RequestContext
    backend: Backend
    tenant: Tenant | None
    admission: Admission | None
    events: EventLog
    #: Its place in admission by class (the submitting request's class and tenant, no
    #: deadline: a background response has no client waiting for its first token).
    ticket: Ticket | None = None
    task: asyncio.Task[None] | None = None
    #: Its task began (a task cancelled before it began runs none of its code).
    entered: bool = False
    #: It left the queue and runs.
    started: bool = False


class BackgroundResponses:
    """The background responses of one serving process, on the Responses API ``api`` (its
    endpoint and store); their event logs kept ``ttl_s`` after they end."""

    def __init__(self, config: BackgroundConfig, api: ResponsesApi, ttl_s: float) -> None:
        self._config = config
        self._api = api
        self._endpoint: Endpoint[ResponsesRequest] = api.endpoint
        self._store: ResponseStore = api.store
        self._ttl_s = ttl_s
        self._slots: asyncio.Semaphore | None = None
        #: Responses waiting or running, by id.
        self._jobs: dict[str, _Job] = {}
        self._waiting = 0
        self._running = 0
        #: The event logs of ended responses by id, with when each ended (the longest ended
        #: first); the bytes of every log, running ones included.
        self._ended_logs: OrderedDict[str, tuple[EventLog, float]] = OrderedDict()
        self._bytes = 0
        self._closing = False

    def events(self, response_id: str) -> EventLog | None:
        """The kept events of a background response run here, or None."""
        job = self._jobs.get(response_id)
        if job is not None:
            return job.events
        self._prune()
        found = self._ended_logs.get(response_id)
        return None if found is None else found[0]

    async def submit(
        self, request: ResponsesRequest, ctx: RequestContext, backend: Backend
    ) -> tuple[dict[str, Any], EventLog]:
        """Prepare ``request`` (its 400s now), store it as queued and start it; the queued
        response and its event log. 429 when the queue is full, 503 while shutting down."""
        self._check_room()
        # The response runs as a stream, whose events are kept to be read again.
        streamed = msgspec.structs.replace(request, stream=True)
        plan = await prepare(self._endpoint, streamed, ctx, backend.models)
        self._check_room()
        stored = self._api.queued(streamed, plan, ctx)
        self._waiting += 1
        try:
            await self._store.put(stored)
        except BaseException:
            self._waiting -= 1
            raise
        admission = current_admission()
        events = EventLog(self._config.max_event_bytes)
        queued = {"type": "response.queued", "sequence_number": 0, "response": stored.response}
        self._bytes += events.append([queued])
        job = _Job(
            stored,
            streamed,
            plan,
            ctx,
            backend,
            current_tenant(),
            None if admission is None else admission.hand_over(),
            events,
            _job_ticket(current_ticket()),
        )
        response_id = stored.id
        self._jobs[response_id] = job
        # A context of its own: none of the submitting request's (its log record, its scopes).
        job.task = asyncio.get_running_loop().create_task(
            self._run(job),
            name=f"turnout-background-{response_id}",
            context=contextvars.Context(),
        )
        job.task.add_done_callback(lambda _: self._ended(job))
        return dict(stored.response), events

    async def cancel(self, response_id: str) -> bool:
        """Cancel a background response waiting or running here (its worker request is
        aborted) and wait for it to end (bounded); False when none runs here."""
        job = self._jobs.get(response_id)
        if job is None or job.task is None:
            return False
        await self._stop(job)
        return True

    async def _stop(self, job: _Job) -> None:
        """Cancel ``job``'s task and wait for it (bounded); one cancelled before it ever ran is
        stored as it ends here."""
        task = job.task
        if task is None:
            return
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_WAIT_S)
        if not job.entered:
            await self._end_cut(job, dict(job.stored.response))

    async def aclose(self) -> None:
        """Shutdown: submissions are refused; every background response waiting or running ends
        as ``failed`` (its worker request aborted), within a bounded wait."""
        self._closing = True
        jobs = list(self._jobs.values())
        await asyncio.gather(*(self._stop(job) for job in jobs))
        left = sum(1 for job in jobs if job.task is not None and not job.task.done())
        if left:
            log.warning("%d background response(s) did not end at shutdown", left)

    def _check_room(self) -> None:
        if self._closing:
            raise BackgroundClosed()
        config = self._config
        if self._waiting + self._running >= config.max_running + config.max_queued:
            raise BackgroundQueueFull(self._running, self._waiting)

    async def _run(self, job: _Job) -> None:
        """One background response, from its queue to its end (its bookkeeping is
        :meth:`_ended`'s, which runs however the task ends)."""
        job.entered = True
        if self._slots is None:
            self._slots = asyncio.Semaphore(self._config.max_running)
        slots = self._slots
        response = dict(job.stored.response)
        try:
            with contextlib.ExitStack() as scopes:
                if job.tenant is not None:
                    scopes.enter_context(tenant_scope(job.tenant))
                if job.admission is not None:
                    scopes.enter_context(admission_scope(job.admission))
                if job.ticket is not None:
                    scopes.enter_context(ticket_scope(job.ticket))
                    scopes.callback(job.ticket.release)
                await slots.acquire()
                try:
                    self._waiting -= 1
                    self._running += 1
                    job.started = True
                    response["status"] = "in_progress"
                    await self._keep(job, response)
                    async with asyncio.timeout(self._config.max_duration_s):
                        await self._generate(job)
                finally:
                    slots.release()
        except asyncio.CancelledError:
            await self._end_cut(job, response)
        except TimeoutError:
            error = {
                "code": "background_timeout",
                "message": f"the response did not finish within {self._config.max_duration_s:g}s",
            }
            await self._fail(job, response, error)
        except ApiError as exc:
            await self._fail(job, response, {"code": exc.code, "message": exc.message})
        except Exception as exc:
            log.exception("background response %s failed", job.stored.id)
            error = {"code": "server_error", "message": f"internal error: {type(exc).__name__}"}
            await self._fail(job, response, error)

    async def _generate(self, job: _Job) -> None:
        """The response on the generation flow, its events into its log; the renderer stores
        the finished response."""
        generated = await run_plan(self._endpoint, job.request, job.plan, job.ctx, job.backend)
        if not isinstance(generated, Streamed):  # (a background request always streams)
            raise TypeError("a background response must stream")
        payloads = generated.payloads
        events = job.events
        try:
            async for batch in payloads:
                for event in batch:  # numbered after response.queued
                    event["sequence_number"] += 1
                self._bytes += events.append(batch)
        finally:
            await payloads.aclose()

    async def _end_cut(self, job: _Job, response: dict[str, Any]) -> None:
        """A background response cancelled (by a client, or by the shutdown): ``cancelled``, or
        ``failed`` at shutdown; one that finished meanwhile stays as it is."""
        try:
            current = await self._store.get(job.stored.id)
        except ApiError:
            current = None
        if current is not None and current.response.get("status") in FINISHED:
            return
        if self._closing:
            error = {
                "code": "shutting_down",
                "message": "the router shut down before the response finished",
            }
            await self._fail(job, response, error)
            return
        response["status"] = "cancelled"
        await self._keep(job, response)

    async def _fail(self, job: _Job, response: dict[str, Any], error: dict[str, Any]) -> None:
        """End as ``failed`` with ``error``: stored, and the ``response.failed`` event."""
        response["status"] = "failed"
        response["error"] = error
        events = job.events
        if not events.ended:
            failed = {
                "type": "response.failed",
                "sequence_number": events.next_sequence,
                "response": response,
            }
            self._bytes += events.append([failed])
        await self._keep(job, response)

    async def _keep(self, job: _Job, response: dict[str, Any]) -> None:
        """Store the response as it is now (a store that fails is logged: the work goes on)."""
        stored = StoredResponse(dict(response), job.stored.input_items, job.stored.tenant)
        try:
            await self._store.put(stored)
        except Exception as exc:
            log.warning("background response %s could not be stored: %s", stored.id, exc)

    def _ended(self, job: _Job) -> None:
        """A background response's task ended (however): its slot, its tenant's admission and
        its place in the queue are given back; its events are kept while they may be read."""
        if job.started:
            self._running -= 1
        else:
            self._waiting -= 1
        if job.admission is not None:
            job.admission.close(job.started)  # one that never ran gives its count back
        response_id = job.stored.id
        self._jobs.pop(response_id, None)
        job.events.end()
        self._ended_logs[response_id] = (job.events, time.monotonic())
        self._prune()

    def _prune(self) -> None:
        """Forget the events of responses ended ``ttl_s`` ago, and of the longest ended ones
        while the logs are over their bounds."""
        now = time.monotonic()
        limit = self._config.max_total_event_bytes
        logs = self._ended_logs
        while logs:
            response_id, (events, ended_at) = next(iter(logs.items()))
            over = self._bytes > limit or len(logs) > MAX_ENDED_LOGS
            if not over and ended_at + self._ttl_s > now:
                break
            del logs[response_id]
            self._bytes -= events.bytes


def _job_ticket(submitted: Ticket | None) -> Ticket | None:
    """A background job's own admission ticket, of the class and tenant of the request that
    submitted it (whose ticket ends with that request)."""
    return None if submitted is None else submitted.scheduler.successor(submitted)
