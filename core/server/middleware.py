"""The operating layer around the app.

* :class:`OpsMiddleware` wraps the whole ASGI app (every route, 404s too): request id (from the
  configured headers or generated) echoed as ``x-request-id``, the current-request record for
  log lines, request metrics and the access log line, the request body deadline (408), the
  connection's request bookkeeping, and a JSON 503 for a request cut by the end of the
  shutdown grace period before it answered.
* :func:`gate_middleware` runs per route, inside Litestar's error handling and CORS: API keys
  (and so the request's tenant), and for generation routes draining, the tenant's limits and
  admission control (429/503), the request timeout (504)
  and cancellation when the client leaves (which aborts the request on the worker). A stream
  cut by the request timeout or the shutdown grace period ends with an error event and
  ``[DONE]``; its admission slot is free before that tail is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from litestar.enums import ScopeType
from litestar.types import (
    ASGIApp,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    HTTPScope,
    Message,
    Receive,
    ReceiveMessage,
    Scope,
    Send,
)

from turnout.admission.context import ticket_scope
from turnout.admission.scheduler import Scheduler
from turnout.admission.ticket import Ticket
from turnout.anthropic.errors import error_event, error_json, is_messages_path
from turnout.config import Config, ServerConfig
from turnout.deadlines import Deadlines
from turnout.errors import ApiError
from turnout.observability.logs import (
    RequestRecord,
    current_record,
    enter_request,
    leave_request,
    log_access,
)
from turnout.observability.metrics import Metrics, route_label
from turnout.server.auth import GENERATION_PATHS, KeyRing, access_of, credentials
from turnout.server.connections import connection_of
from turnout.server.direct_body import DIRECT_BODY_KEY
from turnout.server.limits import (
    AdmissionGate,
    ClientGone,
    ClientWatch,
    Draining,
    Permit,
    QueueFull,
    QueueTimeout,
)
from turnout.server.shutdown import ShutDown, cancelled_by_shutdown
from turnout.server.sse import DONE, sse_error
from turnout.tasks import cancel_and_wait
from turnout.tenants import Admission, Tenant, TenantLimiter, TenantTable
from turnout.tenants.context import admission_scope, tenant_scope

#: A client-given request id is used only if it is short printable ASCII without spaces.
_VALID_ID = re.compile(rb"[\x21-\x7e]{1,200}")
#: Key of a route handler's ``opt`` holding its endpoint as a bare ASGI app, which the gate
#: runs itself: none of Litestar's per-request handler work (request object, signature
#: parsing, a second error layer); its errors go to the app's outer error layer.
ENDPOINT_APP = "turnout.endpoint_app"
#: Longest wait to hand the last piece of a response cut short (timeout, shutdown) to a client
#: that does not read; then its connection is dropped.
TAIL_WAIT_S = 5.0


@dataclass(slots=True)
class OpsState:
    """Per-app operating state shared by the middlewares, the lifespan and the routes."""

    server: ServerConfig
    metrics: Metrics = field(default_factory=Metrics)
    keys: KeyRing = field(init=False)
    gate: AdmissionGate = field(init=False)
    #: The tenants of the current configuration (swapped by a reload, with ``keys``).
    tenants: TenantTable = field(default_factory=lambda: TenantTable({}, {}))
    #: Tenant budgets; None until a configuration has a tenant with limits.
    limiter: TenantLimiter | None = None
    #: Admission by class (``admission.enabled``), in place of ``gate``; None: off.
    admission: Scheduler | None = None
    #: True while the router drains (:meth:`begin_drain`): readiness fails, new generation
    #: requests get 503 ``shutting_down``. The one draining flag of the app.
    draining: bool = False
    #: Generation requests running (admitted or not limited) right now.
    running: int = 0
    #: The requests' body deadlines and request timeouts, on one loop timer.
    deadlines: Deadlines = field(default_factory=Deadlines)
    _idle: asyncio.Event | None = None

    def __post_init__(self) -> None:
        server = self.server
        self.keys = KeyRing.from_config(server, self.tenants)
        self.gate = AdmissionGate(
            server.max_concurrent_requests,
            server.queue_size,
            server.queue_timeout_s,
            self.metrics.queue_depth.set,
        )

    def set_tenants(self, config: Config) -> None:
        """Take the keys and tenants of ``config`` (start-up and reloads); the storage of their
        budgets (``limits``) is set up once and kept."""
        tenants = TenantTable.from_config(config)
        if self.limiter is None and tenants.any_limited:
            metrics = self.metrics
            self.limiter = TenantLimiter(
                config.limits,
                request_timeout_s=self.server.request_timeout_s,
                on_refusal=lambda tenant, reason: metrics.tenant_rejected.labels(
                    tenant, reason
                ).inc(),
            )
        self.tenants = tenants
        self.keys = KeyRing.from_config(config.server, tenants)

    def begin_drain(self) -> None:
        """Start draining: refuse new generation requests and fail those waiting for a slot."""
        self.draining = True
        self.gate.reject_waiting()
        if self.admission is not None:
            self.admission.reject_waiting()

    def _enter(self) -> None:
        self.running += 1
        if self._idle is not None:
            self._idle.clear()

    def _leave(self) -> None:
        self.running -= 1
        if self.running <= 0 and self._idle is not None:
            self._idle.set()

    async def wait_idle(self, timeout: float) -> bool:  # noqa: ASYNC109 - a bound, not a deadline
        """Wait (at most ``timeout`` s) until no generation request runs; True if idle."""
        if self.running <= 0:
            return True
        self._idle = asyncio.Event()
        try:
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True


def _host_problem(scope: HTTPScope) -> str | None:
    """Why the request's ``Host`` fields are wrong (HTTP/1.1 requires exactly one, and any
    version at most one, RFC 9112 section 3.2), or None."""
    hosts = 0
    for name, _ in scope["headers"]:
        if name == b"host":  # uvicorn gives names in lower case
            hosts += 1
    if hosts == 1 or (hosts == 0 and scope["http_version"] == "1.0"):
        return None
    if hosts:
        return "the request has more than one Host header field"
    return "an HTTP/1.1 request needs a Host header field"


async def _refuse(error: ApiError, send: Send) -> None:
    """Answer ``error`` and close the connection (the request goes no further)."""
    body = error.to_json()
    start: HTTPResponseStartEvent = {
        "type": "http.response.start",
        "status": error.status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ],
    }
    await send(start)
    await send(_last_piece(body))


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


class OpsMiddleware:
    """Outermost layer: request id, current-request record, metrics, access log.

    ``direct_body``: no layer inside wraps ``send`` to look at a body piece that is not the
    last (this one does not either), so a stream may write its pieces past them (the
    connection's :class:`~turnout.server.direct_body.DirectBody`); else that is withheld.
    """

    def __init__(self, app: ASGIApp, ops: OpsState, *, direct_body: bool = False) -> None:
        self.app = app
        self.ops = ops
        self._direct_body = direct_body
        self._id_headers = [h.lower().encode() for h in ops.server.request_id_headers]

    def _client_id(self, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
        wanted = self._id_headers
        if not wanted:
            return None
        found: dict[bytes, bytes] = {}
        for raw_key, value in headers:
            key = raw_key.lower()
            if key in wanted and key not in found and _VALID_ID.fullmatch(value):
                found[key] = value
        for name in wanted:
            if name in found:
                return found[name].decode()
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        if not self._direct_body:
            state = scope.get("state")
            if isinstance(state, dict):
                state.pop(DIRECT_BODY_KEY, None)
        record = RequestRecord(scope["method"], scope["path"])
        given = self._client_id(scope.get("headers", []))
        if given is not None:
            record.request_id, record.client_id = given, True
        metrics = self.ops.metrics
        gauge = metrics.in_flight_of(route_label(record.path))
        body_timeout = self.ops.server.body_timeout_s
        body = (
            _BodyDeadline(receive, body_timeout, self.ops.deadlines)
            if body_timeout > 0 and _has_body(scope.get("headers", ()))
            else None
        )
        send_with_id = _SendWithId(send, record, body)
        conn = connection_of(scope)
        if conn is not None:
            conn.request_started()
        gauge.inc()
        token = enter_request(record)
        try:
            try:
                host_problem = _host_problem(scope)
                if host_problem is None:
                    await self.app(scope, body or receive, send_with_id)
                else:
                    await _refuse(ApiError(400, host_problem, code="invalid_host"), send_with_id)
            except asyncio.CancelledError as exc:
                if record.response_started or not cancelled_by_shutdown(exc, self.ops.draining):
                    if record.outcome == "ok":
                        record.outcome = "cancelled"
                    raise
                await self._answer_shutdown(record, send_with_id)
            except BaseException:
                record.outcome = "error"
                raise
            finally:
                if conn is not None:
                    conn.request_finished()
                gauge.dec()
                if record.status is None:
                    record.status = 499 if record.outcome in ("client_gone", "cancelled") else 500
                    if record.outcome == "ok":
                        record.outcome = "client_gone"
                duration = record.elapsed()
                record.ensure_id()
                metrics.observe_request(record, duration)
                log_access(record, duration)
        finally:
            leave_request(token)

    @staticmethod
    async def _answer_shutdown(record: RequestRecord, send: Send) -> None:
        """The grace period ended before the request answered: a JSON 503, not uvicorn's
        plain-text 500 (this swallows the server's cancellation of the request)."""
        task = asyncio.current_task()
        if task is not None and task.uncancel() > 0:
            raise asyncio.CancelledError  # somebody else cancelled it too
        record.outcome = "shutdown"
        error = ShutDown()
        body = error_json(error) if is_messages_path(record.path) else error.to_json()
        start: HTTPResponseStartEvent = {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
        with contextlib.suppress(Exception):
            async with asyncio.timeout(TAIL_WAIT_S):
                await send(start)
                await send(_last_piece(body))


class _SendWithId:
    """The ``send`` the app gets: adds ``x-request-id`` to the response head, and notes the
    response's progress in the request's record (the gate reads it from there). An object
    rather than a closure: a stream holds it as long as it runs, and it is one object to track
    instead of a function, its closure and three cells."""

    __slots__ = ("_body", "_record", "_send")

    def __init__(self, send: Send, record: RequestRecord, body: _BodyDeadline | None) -> None:
        self._send = send
        self._record = record
        self._body = body

    async def __call__(self, message: Message) -> None:
        record = self._record
        if message["type"] == "http.response.start":
            record.status = message["status"]
            record.response_started = True
            headers = []
            for key, value in message.get("headers", ()):
                name = key.lower()
                if name == b"x-request-id":
                    continue
                if name == b"content-type":
                    record.event_stream = value.startswith(b"text/event-stream")
                headers.append((key, value))
            headers.append((b"x-request-id", record.ensure_id().encode()))
            body = self._body
            if body is not None and body.expired:
                headers.append((b"connection", b"close"))  # the rest of the body is unread
            message = {**message, "headers": headers}
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            record.response_complete = True
        await self._send(message)


def _last_piece(body: bytes) -> HTTPResponseBodyEvent:
    return {"type": "http.response.body", "body": body, "more_body": False}


def _has_body(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    for key, value in headers:
        name = key.lower()
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


class _BodyDeadline:
    """The app's ``receive`` while the request body arrives: a 408 when the whole body has not
    come within ``limit_s`` of the request's start (a client trickling its body)."""

    __slots__ = ("_deadline_at", "_deadlines", "_limit_s", "_loop", "_receive", "done", "expired")

    def __init__(self, receive: Receive, limit_s: float, deadlines: Deadlines) -> None:
        self._receive = receive
        self._limit_s = limit_s
        self._deadlines = deadlines
        self._loop = asyncio.get_running_loop()
        self._deadline_at = self._loop.time() + limit_s
        self.done = False
        self.expired = False

    async def __call__(self) -> ReceiveMessage:
        if self.done:
            return await self._receive()
        try:
            with self._deadlines.at(self._deadline_at, self._loop):
                message = await self._receive()
        except TimeoutError:
            self.expired = True
            raise ApiError(
                408,
                f"the request body did not arrive within {self._limit_s:g}s",
                code="request_body_timeout",
            ) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.done = True
        return message


async def _send_tail(send: Send, body: bytes, scope: HTTPScope) -> None:
    """Send the last piece of a response cut short. A client that does not read within
    ``TAIL_WAIT_S`` has its connection dropped (when the server runs with the connection
    guard) rather than holding this task."""
    sending = asyncio.ensure_future(send(_last_piece(body)))
    try:
        done, _ = await asyncio.wait({sending}, timeout=TAIL_WAIT_S)
        if not done:
            conn = connection_of(scope)
            if conn is not None:
                conn.abort()  # the pending send returns once the connection is gone
                await asyncio.wait({sending}, timeout=1.0)
    finally:
        await cancel_and_wait(sending)


def _ticket(scheduler: Scheduler, scope: HTTPScope, tenant: Tenant | None) -> Ticket:
    """The admission ticket of a generation request: its class and deadline headers, its
    tenant's class cap and fair-share weight."""
    wanted = scheduler.wanted_headers
    headers = {name: value for name, value in scope.get("headers", ()) if name in wanted}
    if tenant is None:
        return scheduler.ticket(headers, "", None, 1.0)
    settings = tenant.settings
    return scheduler.ticket(headers, tenant.name, settings.max_class, settings.weight)


#: The admission scope of a request without an admission.
_NO_SCOPE = contextlib.nullcontext()


class _Served:
    """A generation request the gate runs: called when its client leaves (cancels the request,
    unless its response is complete), and :meth:`release` gives its slot back (once). One
    object rather than closures, as it lives as long as a stream."""

    __slots__ = ("gone", "ops", "permit", "record", "task")

    record: RequestRecord | None

    def __init__(self, ops: OpsState, permit: Permit | Ticket, task: asyncio.Task[Any]) -> None:
        self.ops = ops
        self.permit: Permit | Ticket | None = permit
        self.task = task
        self.record = None
        #: True once the client left and the request was cancelled for it.
        self.gone = False

    def __call__(self) -> None:
        record = self.record
        if record is not None and not record.response_complete and not self.gone:
            self.gone = True
            self.task.cancel()

    def release(self) -> None:
        """Give the admission slot back (idempotent)."""
        permit, self.permit = self.permit, None
        if permit is not None:
            permit.release()
            self.ops._leave()


def gate_middleware(ops: OpsState) -> Callable[[ASGIApp], ASGIApp]:
    """The per-route middleware factory (pass it in Litestar's ``middleware``)."""

    def factory(app: ASGIApp) -> ASGIApp:
        return _Gate(app, ops)

    return factory


class _Gate:
    def __init__(self, app: ASGIApp, ops: OpsState) -> None:
        self.app = app
        self.ops = ops
        self._metrics_public = ops.server.metrics_public

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # A plain function handing back what to await: no coroutine of its own, which would
        # live as long as each stream.
        if scope["type"] != ScopeType.HTTP:
            return self.app(scope, receive, send)
        path = scope["path"]
        keys = self.ops.keys
        tenant = None
        if keys.enabled:
            headers = scope.get("headers", ())
            given = credentials(_header(headers, b"authorization"), _header(headers, b"x-api-key"))
            tenant = keys.check(access_of(path, self._metrics_public), given)
        if tenant is not None:
            return self._as_tenant(path, scope, receive, send, tenant)
        return self._route(path, scope, receive, send, None)

    async def _as_tenant(
        self, path: str, scope: HTTPScope, receive: Receive, send: Send, tenant: Tenant
    ) -> None:
        record = current_record()
        if record is not None:
            record.tenant = tenant.name
        with tenant_scope(tenant):
            await self._route(path, scope, receive, send, tenant)

    def _route(
        self, path: str, scope: HTTPScope, receive: Receive, send: Send, tenant: Tenant | None
    ) -> Awaitable[None]:
        if path in GENERATION_PATHS and scope["method"] == "POST":
            return self._generation(scope, receive, send, tenant)
        return self.app(scope, receive, send)

    async def _generation(
        self, scope: HTTPScope, receive: Receive, send: Send, tenant: Tenant | None
    ) -> None:
        """Admit the request, then run the app in this task, under the request timeout; a
        client that leaves cancels it (which closes its worker stream and so aborts the
        request on the worker). The admission slot is given back before a cut-short
        response's tail is sent. The response's progress is in the request's record (noted by
        the ops middleware's send)."""
        ops = self.ops
        server = ops.server
        record = current_record()
        if ops.draining:
            ops.metrics.rejected.labels("draining").inc()
            raise Draining()
        length = _header(scope.get("headers", ()), b"content-length")
        if length is not None and length.isdigit() and int(length) > server.max_body_bytes:
            raise ApiError(
                413,
                f"request body is larger than the limit of {server.max_body_bytes} bytes",
                code="request_too_large",
            )
        ticket = None
        if ops.admission is not None:
            ticket = _ticket(ops.admission, scope, tenant)  # 400 on a bad class or deadline
        watch = ClientWatch(receive, server.max_body_bytes, connection_of(scope))
        admission: Admission | None = None
        admitted = False
        try:
            await watch.start()
            limiter = ops.limiter
            if tenant is not None and tenant.limited and limiter is not None:
                admission = await limiter.admit(tenant)  # 429 over its limits
            try:
                # With classes, the request waits for its place where its token work is known
                # (the step to the workers); the gate's counter is then the scheduler's ceiling.
                permit: Permit | Ticket = (
                    ticket
                    if ticket is not None
                    else await ops.gate.acquire(watch, tenant.priority if tenant else 0)
                )
            except ClientGone:
                ops.metrics.rejected.labels("client_gone").inc()
                if record is not None:
                    record.outcome = "client_gone"
                return
            except (QueueFull, QueueTimeout, Draining) as exc:
                ops.metrics.rejected.labels(exc.code or "rejected").inc()
                raise
            admitted = True
            ops._enter()
            loop = asyncio.get_running_loop()  # once: on Python 3.11 each look-up is a getpid()
            task = asyncio.current_task(loop)
            assert task is not None
            served = _Served(ops, permit, task)
            try:
                if record is None:
                    raise RuntimeError("the gate runs inside the ops middleware")
                served.record = record
                timeout = server.request_timeout_s
                deadline = ops.deadlines.at(
                    loop.time() + timeout if timeout > 0 else math.inf, loop
                )
                handler = scope.get("route_handler")
                app = handler.opt.get(ENDPOINT_APP, self.app) if handler is not None else self.app
                with (
                    admission_scope(admission) if admission is not None else _NO_SCOPE,
                    ticket_scope(ticket) if ticket is not None else _NO_SCOPE,
                ):
                    watch.on_disconnect = served  # only while the app runs
                    try:
                        if watch.gone:
                            served()
                        with deadline:
                            await app(scope, watch, send)
                    except TimeoutError:
                        if not deadline.expired():
                            raise  # the app's own, not the request timeout
                        served.release()
                        record.outcome = "timeout"
                        error = ApiError(
                            504, f"the request timed out after {timeout:g}s", code="request_timeout"
                        )
                        await self._cut_short(record, send, scope, error)
                    except asyncio.CancelledError as exc:
                        if served.gone:
                            self._client_gone(task, record)
                            return
                        if not (
                            record.response_started and record.event_stream
                        ) or not cancelled_by_shutdown(exc, ops.draining):
                            raise  # not started: the ops middleware answers 503 JSON at shutdown
                        if task.uncancel() > 0:
                            raise
                        served.release()
                        record.outcome = "shutdown"
                        await self._cut_short(record, send, scope, ShutDown())
                    finally:
                        watch.on_disconnect = None
            finally:
                served.release()
        finally:
            if ticket is not None:
                ticket.release()
            if admission is not None:
                admission.close(admitted)  # settles its tokens to the real usage
            await watch.close()

    @staticmethod
    def _client_gone(task: asyncio.Task[Any], record: RequestRecord) -> None:
        """Swallow our own cancellation of ``task``; re-raise if somebody else cancelled too."""
        record.outcome = "client_gone"
        if task.uncancel() > 0:
            raise asyncio.CancelledError

    @staticmethod
    async def _cut_short(
        record: RequestRecord, send: Send, scope: HTTPScope, error: ApiError
    ) -> None:
        """End a response that cannot finish: ``error`` as the answer when none started, else
        an SSE error event and ``[DONE]`` (a started non-stream just ends)."""
        if not record.response_started:
            raise error
        if record.response_complete:
            return
        tail = b""
        if record.event_stream:
            messages = is_messages_path(scope["path"])
            tail = error_event(error) if messages else sse_error(error) + DONE
        await _send_tail(send, tail, scope)
