"""The relay's HTTP/1.1 client: a small asyncio client made for forwarding one request and
passing its answer back piece by piece.

- **A pool per origin** of kept-alive connections (:class:`UpstreamClient`): at most
  ``max_connections`` open over every origin (a request waits ``pool_timeout_s`` for one,
  closing an idle connection of another origin first), at most ``max_keepalive_connections``
  idle, each idle one closed after ``keepalive_expiry_s``. A connection the upstream closed
  while it was idle is known by a flag its protocol set (EOF, reset), read when it is taken:
  no poll of the socket.
- **One protocol per connection** (:class:`_Connection`) parses answers with httptools as the
  bytes arrive. The body's bytes of one read of the socket are handed on as one piece, as they
  came (a chunked body's framing removed, nothing else). When the reader lags, the socket's
  reading pauses past ``_HIGH_WATER`` buffered bytes and resumes below ``_LOW_WATER``.
- **Deadlines**: the connection (TCP and TLS) within ``connect_timeout_s``; an answer silent
  for ``idle_timeout_s`` (its head, or between two pieces) fails with :class:`ReadTimeout`. The
  wait for the first byte is the caller's (a ``with`` deadline around :meth:`request`).
- **Failures** are :class:`UpstreamError` subclasses; :class:`UpstreamClosed` is the one that
  says nothing of the request ran: a kept-alive connection the upstream closed (or reset)
  before it answered a byte, the race every keep-alive client meets. The caller sends it again.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections import deque
from collections.abc import Iterable
from typing import Final, cast
from urllib.parse import unquote, urlsplit

import httptools

from turnout.http_workers.settings import HttpWorkersSettings

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "InvalidHeader",
    "Origin",
    "PoolTimeout",
    "ReadError",
    "ReadTimeout",
    "RemoteProtocolError",
    "UpstreamClient",
    "UpstreamClosed",
    "UpstreamError",
    "UpstreamResponse",
]

#: Body bytes buffered for a lagging reader before the socket's reading pauses.
_HIGH_WATER: Final = 256 * 1024
#: ... and below which it resumes.
_LOW_WATER: Final = 64 * 1024
_USER_AGENT: Final = "turnout"


class UpstreamError(Exception):
    """A request to an upstream failed in transport (no usable HTTP answer)."""


class ConnectError(UpstreamError):
    """No connection could be made (refused, unreachable, no such host, TLS refused)."""


class ConnectTimeout(UpstreamError):
    """No connection within ``connect_timeout_s``."""


class PoolTimeout(UpstreamError):
    """Every connection is busy and none was freed within ``pool_timeout_s``."""


class ReadTimeout(UpstreamError):
    """The upstream was silent for ``idle_timeout_s`` while its answer was awaited."""


class ReadError(UpstreamError):
    """The connection failed while the answer was read (reset, closed mid-body), or a new
    connection was closed before any answer."""


class RemoteProtocolError(UpstreamError):
    """The upstream's bytes are no HTTP/1.1 answer."""


class UpstreamClosed(UpstreamError):
    """A kept-alive connection was closed by the upstream before it answered anything (it was
    closing it meanwhile, or went away): nothing of the request ran."""


class InvalidHeader(ValueError):
    """A header to send holds a line break (a misconfigured key, say)."""


class Origin:
    """Where requests go: scheme, host and port (one pool each), the ``Host`` header and the
    path prefix of a server's base URL, and the ``Authorization`` its user info makes (Basic)."""

    __slots__ = ("basic_auth", "host", "host_header", "port", "prefix", "tls", "url")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        default = 443 if self.tls else 80
        self.port = parts.port or default
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if self.port == default else f"{host}:{self.port}"
        self.prefix = parts.path.rstrip("/")
        #: The URL without its user info (what may be shown).
        self.url = f"{parts.scheme}://{self.host_header}{self.prefix}"
        self.basic_auth: str | None = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            self.basic_auth = "Basic " + base64.b64encode(pair.encode()).decode("ascii")

    @property
    def key(self) -> tuple[bool, str, int]:
        """What the pool is shared by."""
        return self.tls, self.host, self.port


class _Pool:
    """The idle connections of one origin, the most recently used last."""

    __slots__ = ("idle", "origin")

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.idle: list[_Connection] = []


class UpstreamClient:
    """Connections to every upstream (see the module doc). Made and used on one event loop;
    :meth:`aclose` closes them all."""

    def __init__(
        self, settings: HttpWorkersSettings, *, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self.settings = settings
        self._ssl = ssl_context
        self._pools: dict[tuple[bool, str, int], _Pool] = {}
        #: Connections open or being opened, over every origin.
        self.open = 0
        #: Of which idle in a pool.
        self.idle = 0
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def _ssl_context(self) -> ssl.SSLContext:
        context = self._ssl
        if context is None:
            import certifi

            # The CA bundle httpx trusts (the probes' client): one trust for both.
            context = self._ssl = ssl.create_default_context(cafile=certifi.where())
        return context

    async def request(
        self,
        origin: Origin,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
    ) -> UpstreamResponse:
        """Send ``method`` ``path`` (appended to the origin's prefix) with ``headers`` and
        ``body``; the answer once its head arrived (its body is read from it)."""
        head = _head(method, origin.prefix + path, origin.host_header, headers, len(body))
        connection, reused = await self._acquire(origin)
        try:
            connection.send(head + body if body else head, reused)
            await connection.wait_head()
        except BaseException:
            self.discard(connection)
            raise
        return UpstreamResponse(connection)

    async def _acquire(self, origin: Origin) -> tuple[_Connection, bool]:
        pool = self._pools.get(origin.key)
        if pool is None:
            pool = self._pools[origin.key] = _Pool(origin)
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        limit = self.settings.max_connections
        waited_until: float | None = None  # the pool's deadline, once a wait began
        while True:
            idle = pool.idle
            if idle:
                expired_before = loop.time() - self.settings.keepalive_expiry_s
                while idle:
                    connection = idle.pop()
                    self.idle -= 1
                    if connection.usable and connection.idle_since > expired_before:
                        return connection, True
                    self.discard(connection)
            if self._closed:
                raise ConnectError("the client is closed")
            if self.open < limit or self._evict_one():
                break
            waiter: asyncio.Future[None] = loop.create_future()
            self._slot_waiters.append(waiter)
            if waited_until is None:
                waited_until = loop.time() + self.settings.pool_timeout_s
            try:
                async with asyncio.timeout_at(waited_until):
                    await waiter
            except TimeoutError:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken too late: the turn goes to the next
                raise PoolTimeout(
                    f"all {limit} connections busy for {self.settings.pool_timeout_s:g}s"
                ) from None
            finally:
                if not waiter.done():
                    waiter.cancel()
        self.open += 1
        try:
            connection = await self._connect(pool.origin, loop)
        except BaseException:
            self.open -= 1
            self._wake_one()
            raise
        return connection, False

    async def _connect(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> _Connection:
        connection = _Connection(self, origin, loop)
        timeout = self.settings.connect_timeout_s
        try:
            async with asyncio.timeout(timeout):
                if origin.tls:
                    await loop.create_connection(
                        lambda: connection,
                        origin.host,
                        origin.port,
                        ssl=self._ssl_context(),
                        server_hostname=origin.host,
                    )
                else:
                    await loop.create_connection(lambda: connection, origin.host, origin.port)
        except TimeoutError:
            connection.abort()
            raise ConnectTimeout(f"no connection to {origin.url} within {timeout:g}s") from None
        except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError is an OSError)
            raise ConnectError(f"{origin.url}: {exc}") from exc
        except BaseException:
            connection.abort()
            raise
        return connection

    def release(self, connection: _Connection) -> None:
        """A connection whose answer was read whole: back to its pool, or closed."""
        connection.busy = False
        if (
            connection.keep_alive
            and connection.usable
            and not self._closed
            and self.idle < self.settings.max_keepalive_connections
        ):
            pool = self._pools[connection.origin.key]
            connection.idle_since = connection.loop.time()
            pool.idle.append(connection)
            self.idle += 1
            if self._sweeper is None:
                self._sweeper = connection.loop.call_later(
                    self.settings.keepalive_expiry_s, self._sweep
                )
            self._wake_one()
        else:
            self.discard(connection)

    def discard(self, connection: _Connection) -> None:
        """Close a connection that is not in a pool (taken, or being released)."""
        if connection.discarded:
            return
        connection.discarded = True
        connection.abort()
        connection.forget_error()
        self.open -= 1
        self._wake_one()

    def _evict_one(self) -> bool:
        """Close the longest idle connection of any origin (to open one elsewhere)."""
        oldest: _Pool | None = None
        for pool in self._pools.values():
            idle = pool.idle
            if idle and (oldest is None or idle[0].idle_since < oldest.idle[0].idle_since):
                oldest = pool
        if oldest is None:
            return False
        connection = oldest.idle.pop(0)
        self.idle -= 1
        self.discard(connection)
        return True

    def _wake_one(self) -> None:
        waiters = self._slot_waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close the idle connections past ``keepalive_expiry_s`` (runs while any is idle)."""
        self._sweeper = None
        loop = self._loop
        if loop is None:
            return
        expired_before = loop.time() - self.settings.keepalive_expiry_s
        for pool in self._pools.values():
            idle = pool.idle
            keep = [c for c in idle if c.usable and c.idle_since > expired_before]
            if len(keep) != len(idle):
                for connection in idle:
                    if not (connection.usable and connection.idle_since > expired_before):
                        self.idle -= 1
                        self.discard(connection)
                pool.idle = keep
        if self.idle:
            soonest = min(p.idle[0].idle_since for p in self._pools.values() if p.idle)
            delay = max(0.01, soonest + self.settings.keepalive_expiry_s - loop.time())
            self._sweeper = loop.call_later(delay, self._sweep)

    def idle_connections(self, url: str) -> int:
        """Idle connections kept for the origin of ``url`` (for tests and diagnostics)."""
        pool = self._pools.get(Origin(url).key)
        return len(pool.idle) if pool is not None else 0

    async def aclose(self) -> None:
        """Close every idle connection; busy ones close when their answers end."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for pool in self._pools.values():
            for connection in pool.idle:
                self.idle -= 1
                self.discard(connection)
            pool.idle = []
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._slot_waiters.clear()


def _head(
    method: str, target: str, host: str, headers: Iterable[tuple[str, str]], length: int
) -> bytes:
    lines = [
        f"{method} {target or '/'} HTTP/1.1\r\nhost: {host}\r\nuser-agent: {_USER_AGENT}\r\n"
        f"accept-encoding: identity\r\ncontent-length: {length}\r\n"
    ]
    for name, value in headers:
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise InvalidHeader(f"header {name!r} holds a line break")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class _Connection(asyncio.Protocol):
    """One connection to an upstream and the answer in progress on it (one at a time)."""

    __slots__ = (
        "_buffered",
        "_chunked",
        "_client",
        "_complete",
        "_error",
        "_has_length",
        "_head_done",
        "_informational",
        "_last_io",
        "_parser",
        "_paused",
        "_pieces",
        "_queue",
        "_received",
        "_reused",
        "_waiter",
        "_watchdog",
        "busy",
        "content_type",
        "discarded",
        "idle_since",
        "keep_alive",
        "loop",
        "lost",
        "origin",
        "status",
        "transport",
    )

    def __init__(
        self, client: UpstreamClient, origin: Origin, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._client = client
        self.origin = origin
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.discarded = False
        self.idle_since = 0.0
        self.keep_alive = False
        self.busy = True
        self._waiter: asyncio.Future[None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._last_io = 0.0
        self._queue: deque[bytes] = deque()
        self._pieces: list[bytes] = []
        self._reset(reused=False)

    def _reset(self, *, reused: bool) -> None:
        self._reused = reused
        self._received = False
        self._head_done = False
        self._informational = False
        self._complete = False
        self._has_length = False
        self._chunked = False
        self._error: BaseException | None = None
        self._buffered = 0
        self._paused = False
        self.status = 0
        self.content_type = "application/json"
        self.keep_alive = False

    # -- the connection, as the pool sees it

    @property
    def usable(self) -> bool:
        """Open, and no answer in progress nor stray bytes: it may take a request."""
        transport = self.transport
        return (
            not self.lost
            and not self.discarded
            and transport is not None
            and not transport.is_closing()
            and self._error is None
        )

    def send(self, data: bytes, reused: bool) -> None:
        """Start a request: ``data`` is its head and body."""
        self._reset(reused=reused)
        self.busy = True
        self._last_io = self.loop.time()
        transport = self.transport
        assert transport is not None
        transport.write(data)

    def abort(self) -> None:
        """Close the connection now (an answer in progress is dropped)."""
        self._disarm()
        self._wake()
        transport = self.transport
        if transport is not None:
            transport.abort()

    def forget_error(self) -> None:
        """Drop the failure kept for the reader (its traceback holds frames that hold this
        connection: a reference cycle once it was raised)."""
        self._error = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses).
        self.transport = cast("asyncio.Transport", transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            # Nothing was asked: a connection that talks out of turn is not reused.
            self._fail(RemoteProtocolError("bytes on an idle connection"))
            return
        self._last_io = self.loop.time()
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(RemoteProtocolError("the upstream switched protocols"))
            return
        except httptools.HttpParserError as exc:
            self._fail(RemoteProtocolError(f"not an HTTP/1.1 answer: {exc}"))
            return
        pieces = self._pieces
        if pieces:
            piece = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            self._queue.append(piece)
            self._buffered += len(piece)
            if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        self.lost = True
        return None  # close the transport (connection_lost follows)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._disarm()
        if self._complete or self._error is not None:
            self._wake()
            return
        if self._head_done and not self._chunked and not self._has_length and exc is None:
            # A body delimited by the connection's end: whole.
            self._complete = True
            self.keep_alive = False
        elif not self._received and self._reused:
            self._error = UpstreamClosed(
                "the upstream closed a kept-alive connection before answering"
                + (f" ({exc})" if exc else "")
            )
        elif not self._head_done:
            self._error = ReadError(
                "the upstream closed the connection before answering" + (f": {exc}" if exc else "")
            )
        else:
            self._error = ReadError(
                "the upstream closed the connection before the answer's end"
                + (f": {exc}" if exc else "")
            )
        self._wake()

    # -- httptools callbacks

    def on_message_begin(self) -> None:
        if self._complete:
            self._error = RemoteProtocolError("stray bytes after the answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value.decode("latin-1")
        elif name == b"content-length":
            self._has_length = True
        elif name == b"transfer-encoding":
            self._chunked = b"chunked" in value.lower()

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            # An interim answer (no body; the real one follows).
            self._informational = True
            self.content_type = "application/json"
            self._has_length = self._chunked = False
            return
        self.status = status
        self._head_done = True
        self._last_io = self.loop.time()

    def on_body(self, body: bytes) -> None:
        if not self._complete:
            self._pieces.append(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self._complete or not self._head_done:
            self._error = RemoteProtocolError("stray bytes after the answer")
            return
        self._complete = True
        self.keep_alive = self._parser.should_keep_alive()

    # -- the answer, as its reader sees it

    def _fail(self, error: BaseException) -> None:
        if self._error is None:
            self._error = error
        self._wake()
        self.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _disarm(self) -> None:
        watchdog = self._watchdog
        if watchdog is not None:
            self._watchdog = None
            watchdog.cancel()

    def _check_idle(self) -> None:
        """The watchdog: fail the read in progress once the upstream was silent too long."""
        self._watchdog = None
        if self._waiter is None:
            return  # nobody waits: armed again by the next wait
        idle = self._client.settings.idle_timeout_s
        silent = self.loop.time() - self._last_io
        if silent >= idle:
            self._fail(ReadTimeout(f"the upstream was silent for {idle:g}s"))
        else:
            self._watchdog = self.loop.call_later(idle - silent, self._check_idle)

    async def _wait(self) -> None:
        waiter = self._waiter = self.loop.create_future()
        if self._watchdog is None:
            self._watchdog = self.loop.call_later(
                self._client.settings.idle_timeout_s, self._check_idle
            )
        try:
            await waiter
        finally:
            self._waiter = None

    async def wait_head(self) -> None:
        """Wait for the answer's head (raises the connection's failure)."""
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    async def read(self) -> bytes:
        """The body's bytes that arrived since the last read, waiting for some; ``b""`` at its
        end (the connection then goes back to the pool). Raises the connection's failure."""
        queue = self._queue
        while not queue:
            if self.discarded:
                return b""  # closed by its reader (a read in progress ends as at the end)
            if self._complete:
                self._disarm()
                self._client.release(self)
                return b""
            if self._error is not None:
                raise self._error
            await self._wait()
        piece = queue.popleft() if len(queue) == 1 else b"".join(_drain(queue))
        self._buffered -= len(piece)
        if self._paused and self._buffered < _LOW_WATER:
            self._paused = False
            if self.transport is not None:
                self.transport.resume_reading()
        return piece


def _drain(queue: deque[bytes]) -> list[bytes]:
    pieces = list(queue)
    queue.clear()
    return pieces


class UpstreamResponse:
    """An answer whose head arrived: its status and content type, its body read piece by
    piece with :meth:`read`. Read to its end, its connection is kept for another request;
    :meth:`close` before that closes it (the upstream sees its client leave)."""

    __slots__ = ("_connection", "content_type", "status")

    def __init__(self, connection: _Connection) -> None:
        self._connection: _Connection | None = connection
        self.status = connection.status
        self.content_type = connection.content_type

    async def read(self) -> bytes:
        """The next piece of the body; ``b""`` at its end."""
        connection = self._connection
        if connection is None:
            return b""
        try:
            piece = await connection.read()
        except BaseException:
            self.close()
            raise
        if not piece:
            self._connection = None
        return piece

    def close(self) -> None:
        """Stop reading: the connection is closed unless the body was read whole."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection._client.discard(connection)
