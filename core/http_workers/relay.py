"""Forwarding requests to HTTP workers: the one place that decides whether a request is
forwarded, sends it through the dispatcher's retry loop and answers with the upstream's bytes.

A request for a model whose regular workers include an HTTP worker is forwarded when none of
the model's gRPC workers is routable (a model served over HTTP only, or an HTTP overflow that
takes over while its gRPC pool is down); otherwise it takes the usual tokenizing path, which
never picks an HTTP worker. The body is forwarded as it came, except its ``model``, which is
rewritten to the name the upstream serves when they differ (an alias, or a configured
``model:`` that names the upstream's model otherwise). The answer goes back byte for byte:
a stream piece by piece as it arrives, never re-encoded, so it names the upstream's model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec
from litestar import Response
from litestar.types import ASGIApp, Receive, Scope, Send

from turnout.deadlines import Deadline
from turnout.errors import ApiError
from turnout.http_workers.connection import (
    HttpConnection,
    UpstreamStream,
    UpstreamUnavailable,
    retried_status,
)
from turnout.observability.logs import current_record
from turnout.observability.metrics import Metrics, RequestMeter, note_stream_cut
from turnout.routing.dispatch import Dispatcher
from turnout.routing.session import WorkerSession
from turnout.routing.types import RoutingRequest
from turnout.server.direct_body import direct_body_of
from turnout.server.sse import DONE, sse_error
from turnout.tenants import current_admission
from turnout.tenants.limiter import Reservation, token_cost
from turnout.workers.errors import WorkerRequestError
from turnout.workers.registry import WorkerRegistry
from turnout.workers.roles import Role
from turnout.workers.worker import Worker

if TYPE_CHECKING:
    from turnout.generation.context import RequestContext
    from turnout.generation.models import ModelTable

__all__ = [
    "EMBEDDINGS_PATH",
    "FORWARDED_PATHS",
    "HttpRelay",
    "RequestPeek",
    "WholeAnswer",
    "peek_request",
]

log = logging.getLogger(__name__)

#: The one forwarded API whose answers are never streamed.
EMBEDDINGS_PATH: Final = "/v1/embeddings"
#: The APIs forwarded to HTTP workers, by the router's path.
FORWARDED_PATHS: Final = frozenset(
    {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings"}
)
#: Bytes of a body per token, for a tenant's reservation before the upstream says its usage.
_BYTES_PER_TOKEN: Final = 4
_USAGE_MARK: Final = b'"total_tokens"'
_STREAM_HEAD: Final = ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"))


class RequestPeek(msgspec.Struct):
    """What the relay reads of a request body (the rest is forwarded unread). Any JSON value
    is taken: the upstream judges the fields, the relay only reads what is usable."""

    model: Any = None
    stream: Any = False
    n: Any = 1
    max_tokens: Any = None
    max_completion_tokens: Any = None
    max_output_tokens: Any = None

    @property
    def model_name(self) -> str | None:
        """The requested model (None: the default one)."""
        return self.model if isinstance(self.model, str) else None

    @property
    def streams(self) -> bool:
        """Whether the client asks for a stream."""
        return self.stream is True

    @property
    def choices(self) -> int:
        """Answers asked for (``n``)."""
        n = self.n
        return n if isinstance(n, int) and n > 0 else 1

    @property
    def limit(self) -> int | None:
        """The most tokens one answer may have, if the request says."""
        for value in (self.max_completion_tokens, self.max_tokens, self.max_output_tokens):
            if isinstance(value, int) and value > 0:
                return value
        return None


#: What the relay reads of a body (raises ``msgspec.DecodeError``/``ValidationError``).
peek_request = msgspec.json.Decoder(RequestPeek).decode


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    input_tokens: int | None = None
    completion_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None

    def counts(self) -> tuple[int, int]:
        """(prompt, completion) tokens."""
        prompt = self.prompt_tokens if self.prompt_tokens is not None else self.input_tokens
        done = self.completion_tokens if self.completion_tokens is not None else self.output_tokens
        prompt = prompt or 0
        if done is None:
            done = max(0, (self.total_tokens or prompt) - prompt)
        return prompt, done


class _Answer(msgspec.Struct):
    usage: _Usage | None = None
    #: A Responses API stream's ``response.completed`` event holds it here.
    response: _Answer | None = None

    def found(self) -> _Usage | None:
        if self.usage is not None:
            return self.usage
        return self.response.found() if self.response is not None else None


_answer = msgspec.json.Decoder(_Answer).decode


def usage_of(body: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens a one-shot answer reports; None when it says none."""
    try:
        usage = _answer(body).found()
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return None if usage is None else usage.counts()


def stream_usage_of(tail: bytes) -> tuple[int, int] | None:
    """(prompt, completion) tokens of the last event in ``tail`` (the stream's last pieces)
    that reports its usage."""
    for line in reversed(tail.split(b"\n")):
        if line.startswith(b"data:") and _USAGE_MARK in line:
            found = usage_of(line[5:].strip())
            if found is not None:
                return found
    return None


class HttpRelay:
    """Forwards the requests of models served by HTTP workers (see the module doc)."""

    def __init__(
        self,
        registry: WorkerRegistry,
        dispatcher: Dispatcher,
        metrics: Metrics,
        *,
        timeout: float | None,
        default_max_tokens: int,
    ) -> None:
        self._registry = registry
        self._dispatcher = dispatcher
        self._metrics = metrics
        self._timeout = timeout
        self._default_max_tokens = default_max_tokens
        #: Models with at least one HTTP worker registered: only their requests are peeked at.
        self.models: set[str] = set()
        registry.add_listener(self._on_membership)
        for model in registry.models():
            self._on_membership(model, registry.workers_for(model))

    def _on_membership(self, model: str, workers: list[Worker]) -> None:
        if any(w.http for w in workers):
            self.models.add(model)
        else:
            self.models.discard(model)

    def forwards(self, model: str) -> bool:
        """Whether a request for ``model`` goes to its HTTP workers now."""
        if model not in self.models:
            return False
        return not any(
            w.routable and not w.http for w in self._registry.role_workers(model, Role.REGULAR)
        )

    async def answer(
        self, path: str, body: bytes, ctx: RequestContext, models: ModelTable
    ) -> ASGIApp | None:
        """The answer of a request for ``path`` when its model is forwarded; None when it is
        not (the usual path serves it, and answers its errors)."""
        try:
            peek = peek_request(body)
            model = models.resolve_name(peek.model_name)
        except (msgspec.DecodeError, msgspec.ValidationError, ApiError):
            return None
        if not self.forwards(model):
            return None
        if path not in FORWARDED_PATHS:
            raise ApiError(
                400,
                f"model {model!r} is served by OpenAI-compatible HTTP workers, which take "
                f"{', '.join(sorted(FORWARDED_PATHS))} only",
                param="model",
                code="unsupported_endpoint",
            )
        return await self._forward(path, body, peek, model, ctx)

    async def _forward(
        self, path: str, body: bytes, peek: RequestPeek, model: str, ctx: RequestContext
    ) -> ASGIApp:
        record = current_record()
        if record is not None:
            record.model = model
        reservation = await self._reserve(body, peek)
        opened: list[UpstreamStream] = []
        bodies: dict[str | None, bytes] = {peek.model_name: body}
        one_shot = not peek.streams or path == EMBEDDINGS_PATH
        headers = (("content-type", "application/json"), ("x-request-id", ctx.worker_request_id))

        async def start(
            worker: Worker,
            remaining: float | None,
            first_wait: Deadline,
            metadata: Sequence[tuple[str, str]],
        ) -> tuple[UpstreamStream, list[bytes]]:
            connection = worker.connection
            assert isinstance(connection, HttpConnection)
            upstream = worker.labels.get("upstream_model") or peek.model_name
            content = bodies.get(upstream)
            if content is None:
                content = bodies[upstream] = _renamed(body, upstream)
            sent = [*headers, *connection.auth_headers().items(), *metadata]
            with first_wait:
                response = await connection.upstream.request(
                    connection.origin, "POST", path, sent, content
                )
                stream = UpstreamStream(response)
                try:
                    status = response.status
                    if one_shot or status >= 400:
                        whole = await _read_all(stream, connection.settings.max_response_bytes)
                        if retried_status(status):
                            raise UpstreamUnavailable(status, whole)
                        first = [whole]
                    else:
                        first = await stream.next_batch()
                        if not first:
                            raise UpstreamUnavailable(502, b"the stream ended before it started")
                except BaseException:
                    await stream.aclose()
                    raise
            opened.append(stream)
            return stream, first

        routing = RoutingRequest(model, headers=ctx.headers, routing_key=ctx.routing_key)
        try:
            session = await self._dispatcher.relay(
                model, routing, start, self._timeout, request=f"POST {path}"
            )
        except WorkerRequestError as exc:
            if exc.attempts > 1:
                self._metrics.retries.labels(model).inc(exc.attempts - 1)
            if record is not None:
                record.worker, record.attempts = exc.worker_id, exc.attempts
            raise
        upstream = opened[-1]
        worker = session.worker.id
        self._metrics.routed_of(model, worker).inc()
        if session.attempts > 1:
            self._metrics.retries.labels(model).inc(session.attempts - 1)
        if record is not None:
            record.worker, record.attempts = worker, session.attempts
        meter = self._metrics.meter(model, record)
        first = await session.next_batch()
        if upstream.finished:
            whole = first[0] if first else b""
            meter.arrived(0, time.perf_counter())
            usage = usage_of(whole) if upstream.status < 400 else (0, 0)
            _settle(meter, reservation, usage, 0)
            return WholeAnswer(whole, upstream.status, upstream.content_type)
        return _Relayed(session, upstream, first, meter, reservation)

    async def _reserve(self, body: bytes, peek: RequestPeek) -> Reservation | None:
        """A limited tenant's tokens, reserved before the request is sent (429 when they do not
        fit): the prompt guessed from the body's size, plus what it may generate."""
        admission = current_admission()
        if admission is None or not admission.tenant.settings.tokens_per_minute:
            return None
        cost = token_cost(
            len(body) // _BYTES_PER_TOKEN, peek.choices, peek.limit, None, self._default_max_tokens
        )
        return await admission.reserve_input_tokens(cost)


def _renamed(body: bytes, model: str | None) -> bytes:
    """``body`` with its ``model`` set to ``model`` (the upstream's name for it)."""
    data = msgspec.json.decode(body)
    data["model"] = model
    return msgspec.json.encode(data)


async def _read_all(stream: UpstreamStream, limit: int) -> bytes:
    """The rest of an upstream's body (at most ``limit`` bytes)."""
    pieces: list[bytes] = []
    size = 0
    while batch := await stream.next_batch():
        for piece in batch:
            size += len(piece)
            if size > limit:
                raise UpstreamUnavailable(502, b"the answer is larger than max_response_bytes")
            pieces.append(piece)
    return b"".join(pieces)


def _settle(
    meter: RequestMeter,
    reservation: Reservation | None,
    usage: tuple[int, int] | None,
    pieces: int,
) -> None:
    """Count the answer's tokens: the upstream's ``usage``, else ``pieces`` (about one token
    per streamed piece); a tenant is charged them instead of its reservation."""
    prompt, completion = usage if usage is not None else (0, pieces)
    meter.finish(prompt, completion)
    if reservation is not None:
        used = prompt + completion if usage is not None else reservation.cost
        reservation.usage = lambda: used


class WholeAnswer:
    """A one-shot answer: the upstream's status, content type and body."""

    __slots__ = ("_body", "_content_type", "_status")

    def __init__(self, body: bytes, status: int, content_type: str) -> None:
        self._body = body
        self._status = status
        self._content_type = content_type.encode("latin-1")

    def response(self) -> Response[bytes]:
        """The same answer as a Litestar response (for a handler that returns one)."""
        return Response(
            self._body, status_code=self._status, media_type=self._content_type.decode("latin-1")
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self._body
        await send(
            {
                "type": "http.response.start",
                "status": self._status,
                "headers": [
                    (b"content-type", self._content_type),
                    (b"content-length", b"%d" % len(body)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})


class _Relayed:
    """A streamed answer passed through: each upstream piece sent as it arrives. A failure
    after the first piece ends the stream with an error event and ``[DONE]``."""

    __slots__ = ("_first", "_meter", "_reservation", "_session", "_upstream")

    def __init__(
        self,
        session: WorkerSession,
        upstream: UpstreamStream,
        first: list[bytes],
        meter: RequestMeter,
        reservation: Reservation | None,
    ) -> None:
        self._session = session
        self._upstream = upstream
        self._first = first
        self._meter = meter
        self._reservation = reservation

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        session = self._session
        upstream = self._upstream
        meter = self._meter
        direct = direct_body_of(scope)
        write = direct.write if direct is not None else None
        pieces = 0
        previous = tail = b""
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": upstream.status,
                    "headers": [
                        *_STREAM_HEAD,
                        (b"content-type", upstream.content_type.encode("latin-1")),
                    ],
                }
            )
            batch = self._first
            self._first = []
            clock = time.perf_counter
            while batch:
                for piece in batch:
                    pieces += 1
                    meter.arrived(1, clock())
                    if _USAGE_MARK in piece:
                        tail = previous + piece
                    previous = piece
                    if write is None or not write(piece):
                        await send({"type": "http.response.body", "body": piece, "more_body": True})
                try:
                    batch = await session.next_batch()
                except WorkerRequestError as exc:
                    note_stream_cut(exc.status)
                    ending = sse_error(exc) + DONE
                    await send({"type": "http.response.body", "body": ending, "more_body": True})
                    break
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await session.aclose()
            _settle(meter, self._reservation, stream_usage_of(tail) if tail else None, pieces)
