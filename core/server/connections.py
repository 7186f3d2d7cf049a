"""Client connections under uvicorn: a cap on how many are open, and deadlines for connections
that carry no request, requests whose headers trickle in and clients that stop reading.

Each open connection costs a file descriptor. A client that opens sockets and sends nothing
(or a few header bytes now and then) would otherwise keep them forever, and once the process
runs out of descriptors nobody can connect. :class:`GuardedProtocol` wraps uvicorn's HTTP
protocol (``http=guarded_protocol(limits)`` in uvicorn's settings) and

* caps open connections at ``max_connections``: a new connection at the cap closes the
  longest-idle one (no request in progress), or is answered 503 when all are busy;
* closes a connection that carries no request for ``idle_timeout_s`` (keep-alive included);
* answers 408 and closes when a request's headers take longer than ``header_timeout_s``;
* closes a connection whose client has not read its pending response for ``send_timeout_s``
  (which also ends any wait on that client's socket);
* answers 431 (414 for the request target) and closes when a request's head is over its
  limits: bytes of a line, of the whole head, or header fields (:mod:`~turnout.server.head_limits`);
* writes through :class:`~turnout.server.direct_body.JoinedWrites` (a response's head and
  its body in one write) and offers each request a
  :class:`~turnout.server.direct_body.DirectBody`, through which a stream writes its middle
  pieces (:mod:`turnout.server.direct_body`).

The ASGI side (the ops middleware) tells the connection when a request starts and ends, and
can abort it (:func:`connection_of`). The request body deadline is enforced there too.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import resource
import socket
import struct
import time
import weakref
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from litestar.types import Scope
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from turnout.config import ServerConfig
from turnout.errors import ApiError
from turnout.server.direct_body import DIRECT_BODY_KEY, DirectBody, JoinedWrites
from turnout.server.head_limits import HeadCount, HeadLimits, HeadTooLarge

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from turnout.server.limits import Leaving

__all__ = [
    "CONNECTION_KEY",
    "ConnectionLimits",
    "GuardedProtocol",
    "connection_of",
]

log = logging.getLogger(__name__)

#: Key of the connection in each request's ``scope["state"]``.
CONNECTION_KEY = "turnout.connection"
#: Descriptors kept for workers, listeners, logs, files and connections being closed when
#: ``max_connections`` is 0: a tenth of the limit, at least this many.
FD_RESERVE = 64
#: At most one "connection limit reached" warning per this many seconds.
_WARN_EVERY_S = 10.0
#: On shutdown, how long a connection whose first request is still on its way (accepted just
#: before the listener closed, or its head half read) waits for that request before closing.
SHUTDOWN_REQUEST_WAIT_S = 1.0


def fd_limit() -> int | None:
    """This process's soft limit on open file descriptors (None when unlimited or unknown)."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):  # pragma: no cover - every POSIX system has it
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def resolve_max_connections(configured: int) -> int:
    """The connection cap: ``configured``, or the descriptor limit less a reserve (a tenth,
    at least ``FD_RESERVE``) when 0 (0 again when the process has no limit)."""
    limit = fd_limit()
    share = None if limit is None else max(limit - max(limit // 10, FD_RESERVE), 16)
    if configured > 0:
        if share is not None and configured > share:
            log.warning(
                "server.max_connections=%d is close to or above the file-descriptor limit "
                "(%d): raise the limit (ulimit -n, LimitNOFILE) or lower max_connections, "
                "else new connections fail once descriptors run out",
                configured,
                limit,
            )
        return configured
    return share or 0


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The connection cap, deadlines and request head limits (0 disables each)."""

    max_connections: int = 0
    idle_timeout_s: float = 0.0
    header_timeout_s: float = 0.0
    send_timeout_s: float = 0.0
    head: HeadLimits = field(default_factory=HeadLimits)

    @classmethod
    def from_server(cls, server: ServerConfig) -> ConnectionLimits:
        """The limits of the ``server`` config section (the cap resolved for this process)."""
        return cls(
            resolve_max_connections(server.max_connections),
            server.idle_timeout_s,
            server.header_timeout_s,
            server.send_timeout_s,
            HeadLimits(server.max_header_line_bytes, server.max_header_bytes, server.max_headers),
        )


def guarded_protocol(limits: ConnectionLimits) -> Callable[..., asyncio.Protocol]:
    """A protocol factory for uvicorn's ``http`` setting (picklable, for worker processes)."""
    return functools.partial(GuardedProtocol, limits=limits)


def connection_of(scope: Scope) -> GuardedProtocol | None:
    """The connection a request came on (None when the server runs without the guard)."""
    state = scope.get("state")
    conn = state.get(CONNECTION_KEY) if isinstance(state, dict) else None
    return conn if isinstance(conn, GuardedProtocol) else None


class _Pool:
    """The connections of one uvicorn server."""

    __slots__ = ("__weakref__", "idle", "last_warning", "open")

    def __init__(self) -> None:
        self.open = 0
        #: Connections without a request in progress, longest-idle first.
        self.idle: dict[GuardedProtocol, None] = {}
        self.last_warning = -math.inf


_pools: weakref.WeakKeyDictionary[Any, _Pool] = weakref.WeakKeyDictionary()


def _response(status: int, error: ApiError) -> bytes:
    body = error.to_json()
    return (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


_REASONS = {
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def _http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's protocol; the httptools one (uvicorn's choice when httptools is installed)
    gets the request head limits and gives each request a :class:`DirectBody`."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - without the "fast" extra: h11, no direct body
        return AutoHTTPProtocol
    if AutoHTTPProtocol is not HttpToolsProtocol:  # pragma: no cover
        return AutoHTTPProtocol

    import httptools

    class HeadParser(httptools.HttpRequestParser):
        """httptools' parser, out of which a request head refused by a callback comes as the
        refusal (:class:`HeadTooLarge`), which uvicorn leaves alone, rather than as the parser
        error uvicorn answers with its 400 and an "Invalid HTTP request" warning."""

        __slots__ = ()

        def feed_data(self, data: bytes | bytearray | memoryview | array[int]) -> None:
            try:
                super().feed_data(data)
            except httptools.HttpParserCallbackError as exc:
                refusal = exc.__context__
                if isinstance(refusal, HeadTooLarge):
                    raise refusal from None
                raise

    class GuardedHttpTools(HttpToolsProtocol):
        #: The head being read, counted against the limits (None: no limits).
        head_count: HeadCount | None = None
        #: Why the request head was refused (then the connection closes).
        head_refused: HeadTooLarge | None = None
        #: A request head is being read.
        head_open = False
        #: The server shuts down: the request on its way is this connection's last.
        last_request = False

        def count_heads(self, limits: HeadLimits) -> None:
            """Hold each request head to ``limits`` (before the connection is made)."""
            self.head_count = HeadCount(limits)
            self.parser = HeadParser(self)
            with contextlib.suppress(AttributeError):  # as uvicorn sets up its parser
                self.parser.set_dangerous_leniencies(lenient_data_after_close=True)

        def data_received(self, data: bytes) -> None:
            head = self.head_count
            if head is None:
                super().data_received(data)
                return
            if self.head_refused is not None:
                return  # answered: closing
            events = head.events
            try:
                super().data_received(data)
                if not self.transport.is_closing():
                    head.fed(len(data), events)
            except HeadTooLarge as refusal:
                self.head_refused = refusal
                self.transport.write(_response(refusal.error.status, refusal.error))
                self.transport.close()

        def on_message_begin(self) -> None:
            self.head_open = True
            if self.head_count is not None:
                self.head_count.begin()
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            if self.head_count is not None:
                self.head_count.url(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            if self.head_count is not None:
                self.head_count.field(name, value)
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self.head_open = False
            if self.head_count is not None:
                self.head_count.complete()
            scope = self.scope
            state = scope.get("state")
            writes: object = self.transport  # what GuardedProtocol gave it
            direct: DirectBody | None = None
            if isinstance(writes, JoinedWrites) and isinstance(state, dict):
                direct = state[DIRECT_BODY_KEY] = DirectBody(writes)
            super().on_headers_complete()
            # Bound only to the request it was made for (not to an upgrade), and never for
            # HEAD, whose body uvicorn does not write.
            cycle: RequestResponseCycle | None = self.cycle
            if (
                direct is not None
                and cycle is not None
                and cycle.scope is scope
                and scope["method"] != "HEAD"
            ):
                direct.bind(cycle)
            if self.last_request and cycle is not None:
                cycle.keep_alive = False

        def shutdown(self) -> None:
            """Close when idle, as uvicorn does, except a connection whose request is on its
            way: a client that connected just before the listener closed gets an answer (a
            503 while draining) rather than a connection closed under its request."""
            cycle = self.cycle
            waiting = cycle is None or (cycle.response_complete and self.head_open)
            if waiting and not self.transport.is_closing():
                self.last_request = True
                self.loop.call_later(SHUTDOWN_REQUEST_WAIT_S, self._close_if_idle)
                return
            super().shutdown()

        def _close_if_idle(self) -> None:
            cycle = self.cycle
            if cycle is None or (cycle.response_complete and not self.pipeline):
                self.transport.close()

    return GuardedHttpTools


_PROTOCOL = _http_protocol()
#: The context of the connections' timers, which read no context variable: without it, each
#: timer would hold a copy of the context current when it was scheduled.
_NO_CONTEXT = contextvars.Context()
#: The inner protocol of a connection once it is lost (nothing is called on it).
_LOST = asyncio.Protocol()


class GuardedProtocol(asyncio.Protocol):
    """uvicorn's HTTP protocol for one connection, under the limits (see the module doc)."""

    __slots__ = (
        "_accepted",
        "_busy",
        "_due",
        "_inner",
        "_limits",
        "_loop",
        "_lost",
        "_on_due",
        "_on_lost",
        "_pool",
        "_reading_headers",
        "_stall",
        "_timer",
        "_timer_at",
        "_transport",
        "_writes",
    )

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: ConnectionLimits,
    ) -> None:
        self._limits = limits
        self._loop = _loop or asyncio.get_event_loop()
        pool = _pools.get(server_state)
        if pool is None:
            pool = _pools[server_state] = _Pool()
        self._pool = pool
        self._inner: asyncio.Protocol = _PROTOCOL(  # type: ignore[call-arg]
            config=config,
            server_state=server_state,
            app_state={**app_state, CONNECTION_KEY: self},
            _loop=_loop,
        )
        if limits.head != HeadLimits() and hasattr(self._inner, "count_heads"):
            self._inner.count_heads(limits.head)
        self._transport: asyncio.Transport | None = None
        #: What the inner protocol writes to (the transport, joining a head with its body).
        self._writes: JoinedWrites | None = None
        self._accepted = False
        #: Requests of this connection in progress (more than one when pipelined).
        self._busy = 0
        self._reading_headers = False
        #: The one timer of the idle and header timeouts; it may run earlier than ``_due``
        #: (then it re-arms itself), so moving the deadline later costs no new timer.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._due = 0.0
        self._on_due: Callable[[], None] | None = None
        self._stall: asyncio.TimerHandle | None = None
        #: Told when the connection is lost (requests watching for their client leaving): one,
        #: or a list when requests are pipelined (no list for the usual one).
        self._on_lost: Leaving | list[Leaving] | None = None
        self._lost = False

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        pool = self._pool
        cap = self._limits.max_connections
        if cap and pool.open >= cap and not self._evict_idle():
            self._refuse(transport)
            return
        pool.open += 1
        self._accepted = True
        self._transport = transport
        self._writes = JoinedWrites(transport, self._loop)
        self._inner.connection_made(cast(asyncio.Transport, self._writes))
        self._wait_for_request()

    def data_received(self, data: bytes) -> None:
        if not self._accepted:
            return  # refused at the cap: closing
        if not self._busy and not self._reading_headers:
            self._reading_headers = True
            self._arm(self._limits.header_timeout_s, self._header_timed_out)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._accepted else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._stop_timer()
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        if self._accepted:
            self._accepted = False
            self._pool.open -= 1
            self._pool.idle.pop(self, None)
            self._inner.connection_lost(exc)
        # The inner protocol's state (and each request's scope) holds this protocol: without
        # the way back, the connection's objects are freed by reference counting as soon as its
        # requests end, not left as a cycle to the garbage collector.
        self._inner = _LOST
        listeners, self._on_lost = self._on_lost, None
        if isinstance(listeners, list):
            for listener in listeners:
                listener.client_left()
        elif listeners is not None:
            listeners.client_left()

    def pause_writing(self) -> None:
        self._inner.pause_writing()
        if self._limits.send_timeout_s > 0 and self._stall is None:
            self._stall = self._loop.call_later(self._limits.send_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        self._inner.resume_writing()

    # The ASGI side ------------------------------------------------------------------------

    def request_started(self) -> None:
        """A request's headers are in and the app runs it."""
        self._busy += 1
        self._reading_headers = False
        self._pool.idle.pop(self, None)
        self._disarm()

    def request_finished(self) -> None:
        """The app is done with a request."""
        self._busy -= 1
        if self._busy <= 0:
            self._busy = 0
            self._wait_for_request()

    @property
    def lost(self) -> bool:
        """True once the connection is gone."""
        return self._lost

    def on_lost(self, listener: Leaving) -> None:
        """Call ``listener.client_left()`` (once) when the connection is lost: how a request
        notices its client leaving without a task reading its ``receive``."""
        listeners = self._on_lost
        if listeners is None:
            self._on_lost = listener
        elif isinstance(listeners, list):
            listeners.append(listener)
        else:
            self._on_lost = [listeners, listener]

    def forget(self, listener: Leaving) -> None:
        """Stop telling ``listener`` (given to :meth:`on_lost`)."""
        listeners = self._on_lost
        if listeners is listener:
            self._on_lost = None
        elif isinstance(listeners, list):
            with contextlib.suppress(ValueError):
                listeners.remove(listener)

    def abort(self) -> None:
        """Drop the connection now: a reset, discarding what the client has not read (the
        kernel would otherwise keep sending it after close)."""
        transport = self._transport
        if transport is None:
            return
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()

    # internals ----------------------------------------------------------------------------

    def _wait_for_request(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        self._reading_headers = False
        self._pool.idle[self] = None
        self._arm(self._limits.idle_timeout_s, self._idle_timed_out)

    def _arm(self, delay: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` in ``delay`` s unless re-armed or disarmed before. Lazy: a timer
        already due earlier is kept (it re-arms itself when it runs), so the idle and header
        timeouts of a busy keep-alive connection do not schedule a timer per request."""
        if delay <= 0:
            self._on_due = None
            return
        due = self._loop.time() + delay
        self._due, self._on_due = due, callback
        if self._timer is None or self._timer_at > due:
            self._schedule(due)

    def _disarm(self) -> None:
        self._on_due = None  # a pending timer finds nothing due and lapses

    def _schedule(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._timer_ran, context=_NO_CONTEXT)

    def _timer_ran(self) -> None:
        self._timer = None
        callback = self._on_due
        if callback is None:
            return
        if self._loop.time() < self._due:
            self._schedule(self._due)
            return
        self._on_due = None
        callback()

    def _stop_timer(self) -> None:
        self._on_due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _close(self) -> None:
        self._stop_timer()
        self._pool.idle.pop(self, None)
        if self._writes is not None:
            self._writes.close()

    def _idle_timed_out(self) -> None:
        if not self._busy:
            self._close()

    def _header_timed_out(self) -> None:
        if self._busy or self._transport is None:
            return
        seconds = self._limits.header_timeout_s
        error = ApiError(
            408,
            f"the request headers did not arrive within {seconds:g}s",
            code="request_header_timeout",
        )
        if self._writes is not None:
            self._writes.write(_response(408, error))
        self._close()

    def _stalled(self) -> None:
        self._stall = None
        log.info(
            "closing a connection from %s: it read nothing of its response for %gs",
            _peer(self._transport),
            self._limits.send_timeout_s,
            extra={"request_id": "-"},
        )
        self.abort()

    def _evict_idle(self) -> bool:
        """Close the longest-idle connection to make room; False when none is idle."""
        for conn in self._pool.idle:
            conn._close()
            return True
        return False

    def _refuse(self, transport: asyncio.Transport) -> None:
        pool = self._pool
        now = time.monotonic()
        if now - pool.last_warning >= _WARN_EVERY_S:
            pool.last_warning = now
            log.warning(
                "connection limit reached: %d connections are open and busy; refusing new "
                "ones with 503 (server.max_connections, see docs/deploy.md)",
                pool.open,
                extra={"request_id": "-"},
            )
        error = ApiError(
            503,
            "too many open connections; retry later",
            code="connection_limit",
        )
        transport.write(_response(503, error))
        transport.close()


def _peer(transport: asyncio.BaseTransport | None) -> str:
    peer = transport.get_extra_info("peername") if transport is not None else None
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
