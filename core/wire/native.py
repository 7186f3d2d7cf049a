"""gRPC calls over turnout's own HTTP/2 connections: the default worker transport.

A ``NativeChannel`` keeps one connection per worker (a second one only if the worker caps
concurrent streams), reconnects with back-off after a failure, and starts ``NativeCall``s. A call
is the connection's ``StreamHandler``: frames are parsed in the loop's read callback, whole gRPC
messages queue up, and ``read()`` returns them one by one without waking the loop again while some
are queued.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import struct
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final
from urllib.parse import unquote

import grpc
from google.protobuf.message import DecodeError

from turnout import __version__
from turnout.deadlines import Deadlines
from turnout.wire.errors import ClientClosed, MalformedResponse, StreamRefused, WorkerCallError
from turnout.wire.header_codec import Headers, encode_fields
from turnout.wire.http2 import ConnectionSettings, ErrorCode, Http2Connection
from turnout.wire.loop_load import LoopLoad, loop_load
from turnout.wire.transport import ClientSettings, Message, MessageType, Metadata

__all__ = ["NativeCall", "NativeChannel"]

_STATUS_BY_NUMBER: Final = {code.value[0]: code for code in grpc.StatusCode}
#: gRPC's mapping of HTTP statuses from a non-gRPC answer (gRPC "HTTP to gRPC status" doc).
_HTTP_TO_GRPC: Final = {
    400: grpc.StatusCode.INTERNAL,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.UNIMPLEMENTED,
    429: grpc.StatusCode.UNAVAILABLE,
    502: grpc.StatusCode.UNAVAILABLE,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.UNAVAILABLE,
}
_RESET_TO_GRPC: Final = {
    # Refused after it answered something: not the safe "never processed" refusal.
    ErrorCode.REFUSED_STREAM: grpc.StatusCode.UNAVAILABLE,
    ErrorCode.CANCEL: grpc.StatusCode.CANCELLED,
    ErrorCode.ENHANCE_YOUR_CALM: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ErrorCode.INADEQUATE_SECURITY: grpc.StatusCode.PERMISSION_DENIED,
}
_USER_AGENT: Final = f"turnout/{__version__}"
_INITIAL_BACKOFF_S: Final = 0.2
#: How long a released call waits for the worker's status before it is cancelled.
_RELEASE_GRACE_S: Final = 2.0
#: Most bytes of messages that ``read_batch`` hands over at once.
BATCH_BYTES: Final = 16 * 1024
#: The prefix of a gRPC message: compressed flag, length.
_PREFIX: Final = struct.Struct(">BI")


class NativeCall:
    """One unary-request, streamed-response gRPC call; ``read()`` until it returns None.

    Flow control: the bytes of received messages are credited back to the worker (HTTP/2
    WINDOW_UPDATE) only once the reader has taken every queued message, so a reader that stops
    reading pauses the worker after one stream window (``ClientSettings.stream_window_bytes``)
    instead of letting the whole answer pile up here. Bytes of a message still incomplete are
    credited as they arrive while nothing else waits to be read: a message larger than the window
    is reassembled (bounded by ``max_message_bytes``) rather than deadlocking.
    """

    __slots__ = (
        "_body",
        "_channel",
        "_connecting",
        "_connection",
        "_credit_at",
        "_cut",
        "_deadline_at",
        "_ended",
        "_error",
        "_got_headers",
        "_load",
        "_loop",
        "_max_message",
        "_messages",
        "_metadata",
        "_method",
        "_pace_at",
        "_pace_s",
        "_pace_timer",
        "_parse",
        "_partial",
        "_path",
        "_queued",
        "_stream_id",
        "_timer",
        "_uncredited",
        "_waiter",
    )

    def __init__(
        self,
        channel: NativeChannel,
        method: str,
        path: str,
        request: Message,
        *,
        response_type: MessageType,
        timeout: float | None,
        metadata: Metadata = (),
    ) -> None:
        self._channel = channel
        self._method = method
        self._path = path
        self._metadata = metadata
        self._parse = _parser(response_type)
        raw = request.SerializeToString()
        self._body = b"\x00" + len(raw).to_bytes(4, "big") + raw
        # Kept: on Python 3.11 every asyncio.get_running_loop() is a getpid() system call.
        loop = self._loop = asyncio.get_running_loop()
        self._deadline_at = None if timeout is None else loop.time() + timeout
        self._max_message = channel.settings.max_message_bytes
        self._messages: deque[bytes] = deque()
        #: Bytes of a message not complete yet (and of the ones after it in the same frame).
        self._partial = bytearray()
        #: Received bytes not credited back to the stream's window yet. They are credited
        #: only once the reader took every message (so a reader that stops reading pauses the
        #: worker after one stream window), and in steps of at least half a window
        #: (``_credit_at``, set when the stream opens).
        self._uncredited = 0
        self._credit_at = 0
        #: Bytes of the queued messages (with their 5-byte prefixes).
        self._queued = 0
        #: True when the last batch left messages queued (``read_batch`` yields first).
        self._cut = False
        self._error: WorkerCallError | None = None
        self._ended = False
        self._connecting: asyncio.Task[None] | None = None
        self._got_headers = False
        self._connection: Http2Connection | None = None
        self._stream_id = 0
        #: The grace period of a released call (the deadline is on the channel's board).
        self._timer: asyncio.TimerHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        #: Pacing of the reads while the loop is busy (``ClientSettings.busy_read_interval_s``):
        #: the reader is woken for new messages no sooner than ``_pace_at``.
        self._pace_s = channel.settings.busy_read_interval_s
        self._load = channel.loop_load(loop) if self._pace_s > 0 else None
        self._pace_at = 0.0
        self._pace_timer: asyncio.TimerHandle | None = None

    # -- Call protocol -------------------------------------------------------------------------

    async def read(self) -> Any:
        """The next response message; None once the worker ended the call with OK (or after
        ``cancel()``). Raises ``WorkerCallError`` for any other end."""
        messages = self._messages
        if messages or await self._wait():
            data = messages.popleft()
            self._queued -= len(data) + 5
            if not messages and self._uncredited >= self._credit_at:
                self._credit()
            try:
                return self._parse(data)
            except DecodeError as exc:
                raise self._malformed(exc) from None
        return None

    async def read_batch(self) -> list[Any]:
        """Every message already received (at least one, waiting if needed); [] once the
        worker ended the call with OK (or after ``cancel()``). Raises ``WorkerCallError`` for
        any other end, after the messages received before it were read.

        A batch holds at most ``BATCH_BYTES`` of messages (or one larger message); when more
        are queued, the next call lets the event loop run other tasks before it returns, so a
        huge answer is handed over (and worked on by the caller) in slices, not in one go.
        """
        if self._cut:
            self._cut = False
            await asyncio.sleep(0)
        messages = self._messages
        while not messages:  # ``_wait`` inline: no coroutine of its own per stream step
            if self._error is None and not self._ended and self._connecting is None:
                # What ``_waiting`` does in this, the usual case (without a call).
                waiter = self._waiter = self._loop.create_future()
                await waiter
                continue
            waiting = self._waiting()
            if waiting is None:
                return []
            await waiting
        taken: Iterable[bytes] = messages
        if self._queued > BATCH_BYTES:
            taken = self._take_slice()
        try:
            batch = list(map(self._parse, taken))
        except DecodeError as exc:
            return self._parse_until_malformed(taken, exc)
        if taken is messages:
            messages.clear()
            self._queued = 0
        if not messages and self._uncredited >= self._credit_at:
            self._credit()
        load = self._load
        if load is not None:
            self._pace_at = self._loop.time() + self._pace_s if load.is_busy() else 0.0
        return batch

    def _take_slice(self) -> list[bytes]:
        """Messages from the head of the queue: at most ``BATCH_BYTES`` of them, at least one."""
        messages = self._messages
        first = messages.popleft()
        taken = [first]
        size = len(first) + 5
        while messages and size + len(messages[0]) + 5 <= BATCH_BYTES:
            data = messages.popleft()
            taken.append(data)
            size += len(data) + 5
        self._queued -= size
        self._cut = bool(messages)
        return taken

    def _parse_until_malformed(self, taken: Iterable[bytes], exc: DecodeError) -> list[Any]:
        """The messages of ``taken`` before the first that does not parse; the call fails
        with ``MalformedResponse`` (raised now if no message came before it)."""
        parse = self._parse
        batch = []
        for data in taken:
            try:
                batch.append(parse(data))
            except DecodeError:
                break
        if not batch:
            raise self._malformed(exc)
        self._malformed(exc)
        return batch

    def _malformed(self, exc: DecodeError) -> WorkerCallError:
        """Fail the call (even one that already ended): a message of the worker is not valid
        protobuf. Returns the error to raise now."""
        error = MalformedResponse(
            f"worker sent a message that is not valid protobuf: {exc}",
            worker=self._channel.worker,
            method=self._method,
        )
        self._messages.clear()
        self._queued = 0
        self._cut = False
        if self._error is None:
            self._error = error
            self._release(ErrorCode.CANCEL)
        return error.fresh()

    def _credit(self) -> None:
        """Credit every received byte back to the stream's window (the reader took them)."""
        uncredited, self._uncredited = self._uncredited, 0
        connection = self._connection
        if connection is not None:
            connection.consume(self._stream_id, uncredited)

    async def _wait(self) -> bool:
        """Wait until a message is queued (True) or the call ended with OK (False)."""
        while not self._messages:
            waiting = self._waiting()
            if waiting is None:
                return False
            await waiting
        return True

    def _waiting(self) -> asyncio.Future[Any] | None:
        """While no message is queued: what to wait for (the connection being made, or a
        waiter that ``_wake`` completes); None once the call ended with OK. Raises the call's
        error."""
        if self._error is not None:
            raise self._error.fresh()
        if self._ended:
            return None
        if self._connecting is not None:
            return self._connecting
        waiter = self._waiter = self._loop.create_future()
        return waiter

    def cancel(self) -> None:
        """Stop now: the stream is reset and ``read()`` returns None."""
        if self.done():
            return
        self._ended = True
        self._messages.clear()
        if self._connecting is not None:
            self._connecting.cancel()
        self._release(ErrorCode.CANCEL)
        self._wake()

    def release(self) -> None:
        """Leave the stream open for the worker's status, but cancel it if that takes long."""
        if self.done():
            return
        self._cancel_timer()
        self._timer = self._loop.call_later(_RELEASE_GRACE_S, self.cancel)

    def done(self) -> bool:
        """True once the call ended (worker status, failure or cancel)."""
        return self._ended or self._error is not None

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Send the request now on a ready connection, or connect first in a task."""
        connection = self._channel.ready_connection()
        if connection is not None:
            self._open(connection)
        else:
            self._connecting = self._loop.create_task(self._connect_and_open())

    async def _connect_and_open(self) -> None:
        try:
            if self._deadline_at is None:
                connection = await self._channel.connection()
            else:
                async with asyncio.timeout_at(self._deadline_at):
                    connection = await self._channel.connection()
        except TimeoutError:
            self._fail(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded while connecting")
        except WorkerCallError as exc:
            if not self.done():
                self._error = exc.fresh()  # kept without the traceback of its raise
        else:
            if not self.done():
                self._open(connection)
        finally:
            self._connecting = None

    def _open(self, connection: Http2Connection) -> None:
        loop = self._loop
        deadline_at = self._deadline_at
        remaining = None if deadline_at is None else deadline_at - loop.time()
        try:
            channel = self._channel
            self._stream_id = connection.open_stream(
                self,
                channel.call_headers(remaining, self._metadata),
                self._body,
                channel.path_headers(self._path),
            )
        except ConnectionError as exc:
            self._fail(grpc.StatusCode.UNAVAILABLE, str(exc))
            return
        self._connection = connection
        self._credit_at = connection.settings.stream_window // 2
        if deadline_at is not None:
            self._channel.deadlines.watch(self, loop)

    @property
    def when(self) -> float:
        """The call's deadline (loop time), for the channel's ``Deadlines`` board."""
        return math.inf if self._deadline_at is None else self._deadline_at

    def expire(self) -> None:
        """The deadline passed (called by the channel's ``Deadlines`` board)."""
        self._fail(grpc.StatusCode.DEADLINE_EXCEEDED, "deadline exceeded")

    # -- StreamHandler -------------------------------------------------------------------------

    def on_headers(self, headers: Headers, end_stream: bool) -> None:
        """Response headers, then trailers carrying the gRPC status."""
        channel = self._channel
        got_headers = self._got_headers
        # The connection hands over the very same tuple for a block it decoded before: a
        # worker's usual headers and OK trailers are checked once, then recognised.
        if got_headers:
            if end_stream and headers is channel.ok_trailers and not self._partial:
                self._finish()
                return
        elif not end_stream and headers is channel.good_headers:
            self._got_headers = True
            return
        fields = dict(headers)
        if not got_headers:
            self._got_headers = True
            status = fields.get(":status", "")
            if status != "200":
                code = _HTTP_TO_GRPC.get(int(status) if status.isdigit() else 0)
                self._fail(code or grpc.StatusCode.UNKNOWN, f"worker answered HTTP {status}")
                return
            if not fields.get("content-type", "").startswith("application/grpc"):
                self._fail_malformed("worker answered without a gRPC body", grpc.StatusCode.UNKNOWN)
                return
        if not end_stream:
            channel.good_headers = headers
            return
        raw_status = fields.get("grpc-status")
        if raw_status is None or not raw_status.isdigit():
            self._fail_malformed("worker ended the call without a gRPC status")
            return
        code = _STATUS_BY_NUMBER.get(int(raw_status), grpc.StatusCode.UNKNOWN)
        if code is grpc.StatusCode.OK:
            if self._partial:
                self._fail_malformed("worker ended the call mid-message")
                return
            if got_headers:
                channel.ok_trailers = headers
            self._finish()
        else:
            self._fail(code, unquote(fields.get("grpc-message", "")))

    def on_data(self, data: bytes, end_stream: bool) -> None:
        """Queue the gRPC messages of a DATA frame and wake the reader.

        A frame that holds one whole message (the usual frame) is queued as it is; any other
        goes through ``_split``.
        """
        size = len(data)
        if (
            self._partial
            or end_stream
            or size < 5
            or _PREFIX.unpack_from(data) != (0, size - 5)
            or size - 5 > self._max_message
        ):
            if not self._split(data, end_stream):
                return
        else:
            self._messages.append(data[5:])
            self._queued += size
            self._uncredited += size
        waiter = self._waiter
        if waiter is None:
            return  # the reader is busy with the previous batch: it takes these next
        if self._pace_at:
            self._wake_paced(waiter)
        else:  # ``_wake`` inline (no pace timer is pending while ``_pace_at`` is 0)
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _split(self, data: bytes, end_stream: bool) -> bool:
        """Split a frame into length-prefixed gRPC messages; True when messages wait for the
        reader.

        A message spread over many DATA frames is gathered in one growing buffer (linear in its
        size); messages that arrive whole are sliced straight out of the frame.
        """
        partial = self._partial
        view: bytes | bytearray
        if partial:
            partial += data
            view = partial
        else:
            view = data
        size = len(view)
        pos = 0
        messages = self._messages
        limit = self._max_message
        while size - pos >= 5:
            compressed, length = _PREFIX.unpack_from(view, pos)
            if compressed:
                self._fail_malformed("worker sent a compressed message")
                return False
            if length > limit:
                self._fail(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"response of {length} bytes exceeds the limit of {limit}",
                )
                return False
            start = pos + 5
            pos = start + length
            if pos > size:
                pos = start - 5
                break
            messages.append(bytes(partial[start:pos]) if partial else data[start:pos])
        self._queued += pos
        if partial:
            del partial[:pos]
        elif pos < size:
            partial += memoryview(data)[pos:]
        if end_stream:
            self._fail_malformed("worker ended the call without trailers")
            return False
        self._uncredited += len(data)
        if messages:
            return True
        # Only part of a message is here: the reader can do nothing before the rest comes.
        if self._uncredited >= self._credit_at:
            self._credit()
        return False

    def on_reset(self, error_code: int) -> None:
        """The worker reset the stream."""
        self._connection = None
        message = f"worker reset the stream (HTTP/2 error {error_code})"
        if error_code == ErrorCode.REFUSED_STREAM and not self._got_headers:
            self._fail_with(self._refused(message))
            return
        code = _RESET_TO_GRPC.get(error_code, grpc.StatusCode.INTERNAL)
        self._fail(code, message)

    def on_closed(self, reason: str, refused: bool) -> None:
        """The connection went away under the call (``refused``: before the worker took it)."""
        self._connection = None
        if refused:
            self._fail_with(self._refused(reason))
        else:
            self._fail(grpc.StatusCode.UNAVAILABLE, reason)

    def _refused(self, reason: str) -> StreamRefused:
        return StreamRefused(
            f"{reason}; the worker did not process the call",
            worker=self._channel.worker,
            method=self._method,
        )

    # -- ending --------------------------------------------------------------------------------

    def _finish(self) -> None:
        self._ended = True
        self._connection = None
        self._cancel_timer()
        self._wake()

    def _fail(self, code: grpc.StatusCode, message: str) -> None:
        if not self.done():
            self._fail_with(
                WorkerCallError(code, message, worker=self._channel.worker, method=self._method)
            )

    def _fail_malformed(
        self, message: str, code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    ) -> None:
        if not self.done():
            self._fail_with(
                MalformedResponse(
                    message, code=code, worker=self._channel.worker, method=self._method
                )
            )

    def _fail_with(self, error: WorkerCallError) -> None:
        if self.done():
            return
        self._error = error
        self._release(ErrorCode.CANCEL)
        self._wake()

    def _release(self, error_code: int) -> None:
        """Reset the stream if it is still open on the connection; stop the deadline timer."""
        self._cancel_timer()
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.reset_stream(self._stream_id, error_code)

    def _cancel_timer(self) -> None:
        """Stop watching the deadline, and the grace period of a released call."""
        if self._deadline_at is not None:
            self._channel.deadlines.forget(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _wake_paced(self, waiter: asyncio.Future[None]) -> None:
        """Wake the reader (its ``waiter``) for new messages, but not before ``_pace_at``: while
        the loop is busy, a stream takes its messages in fewer, larger batches (fewer steps per
        stream keep the loop's turns short, so that new requests are not kept waiting behind
        them)."""
        if self._pace_timer is not None or waiter.done():
            return  # a wake is due already, or the reader was cancelled (it left its waiter)
        loop = self._loop
        if loop.time() < self._pace_at:
            self._pace_timer = loop.call_at(self._pace_at, self._wake)
        else:
            self._waiter = None
            waiter.set_result(None)

    def _wake(self) -> None:
        timer = self._pace_timer
        if timer is not None:
            timer.cancel()
            self._pace_timer = None
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None  # the reader is no longer waiting (``_wake_paced``)
            if not waiter.done():
                waiter.set_result(None)


class NativeChannel:
    """Connections to one worker (``host:port``), opened on demand and reopened after loss."""

    def __init__(self, target: str, *, tls: bool, settings: ClientSettings, worker: str) -> None:
        self.target = target
        self.settings = settings
        self.worker = worker
        host, _, port = target.rpartition(":")
        self._host = host.strip("[]")
        self._port = int(port)
        self._tls = tls
        self._scheme = "https" if tls else "http"
        self._connections: list[Http2Connection] = []
        self._connecting: asyncio.Task[Http2Connection] | None = None
        #: The encoded headers of each method path (all but the deadline and the metadata).
        self._path_headers: dict[str, bytes] = {}
        self._load: tuple[asyncio.AbstractEventLoop, LoopLoad] | None = None
        #: The last response headers found to open a gRPC answer, and the last trailers found
        #: to end a call with OK (see ``NativeCall.on_headers``).
        self.good_headers: Headers | None = None
        self.ok_trailers: Headers | None = None
        self._backoff = _INITIAL_BACKOFF_S
        self._retry_at = 0.0
        self._last_error: WorkerCallError | None = None
        self._closed = False
        #: The deadlines of the calls in progress, on one loop timer (a timer per call costs
        #: more, and nearly every call ends long before its deadline).
        self.deadlines = Deadlines()
        # Shared by every connection to the worker: a keep-alive interval doubled after the
        # worker's ENHANCE_YOUR_CALM ("too many pings") stays doubled across reconnects.
        self._connection_settings = ConnectionSettings(
            keepalive_time_s=settings.keepalive_time_s,
            keepalive_timeout_s=settings.keepalive_timeout_s,
            stream_window=settings.stream_window_bytes,
        )

    @property
    def keepalive_time_s(self) -> float:
        """The keep-alive interval in use (longer than configured once the worker asked)."""
        return self._connection_settings.keepalive_time_s

    def call(
        self,
        method: str,
        path: str,
        request: Message,
        response_type: MessageType,
        timeout: float | None,
        *,
        metadata: Metadata = (),
    ) -> NativeCall:
        """Start a call: the request goes out now (or as soon as a connection is up)."""
        call = NativeCall(
            self,
            method,
            path,
            request,
            response_type=response_type,
            timeout=timeout,
            metadata=metadata,
        )
        call.start()
        return call

    def ready_connection(self) -> Http2Connection | None:
        """A connection that takes new streams right now, if there is one."""
        for connection in self._connections:
            if connection.usable:
                return connection
        return None

    def path_headers(self, path: str) -> bytes:
        """The encoded headers that every call of ``path`` sends (encoded once)."""
        encoded = self._path_headers.get(path)
        if encoded is None:
            encoded = self._path_headers[path] = encode_fields(self._fixed_headers(path))
        return encoded

    def call_headers(self, timeout: float | None, metadata: Metadata = ()) -> list[tuple[str, str]]:
        """The headers of one call after its path's: its deadline, then ``metadata``."""
        headers = [] if timeout is None else [("grpc-timeout", _timeout_header(timeout))]
        if metadata:
            headers.extend(metadata)
        return headers

    def _fixed_headers(self, path: str) -> list[tuple[str, str]]:
        return [
            (":method", "POST"),
            (":scheme", self._scheme),
            (":path", path),
            (":authority", self.target),
            ("te", "trailers"),
            ("content-type", "application/grpc"),
            ("user-agent", _USER_AGENT),
        ]

    def loop_load(self, loop: asyncio.AbstractEventLoop) -> LoopLoad:
        """The ``LoopLoad`` of ``loop`` (the running loop), looked up once per loop."""
        cached = self._load
        if cached is None or cached[0] is not loop:
            cached = self._load = (loop, loop_load(loop))
        return cached[1]

    async def connection(self) -> Http2Connection:
        """A connection that takes new streams, connecting if there is none."""
        connection = self.ready_connection()
        if connection is not None:
            return connection
        if self._closed:
            raise ClientClosed(worker=self.worker)
        if self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
        return await asyncio.shield(self._connecting)

    async def wait_ready(self, within: float) -> None:
        """Connect (retrying) until ``within`` seconds have passed; ``WorkerCallError`` then."""
        loop = asyncio.get_running_loop()
        deadline_at = loop.time() + within
        while True:
            try:
                async with asyncio.timeout_at(deadline_at):
                    await self.connection()
                return
            except TimeoutError:
                break
            except WorkerCallError:
                if self._closed:
                    raise
                pause = max(self._retry_at - loop.time(), 0.05)
                if loop.time() + pause >= deadline_at:
                    break
                await asyncio.sleep(pause)
        raise WorkerCallError(
            grpc.StatusCode.UNAVAILABLE, f"not reachable within {within:g}s", worker=self.worker
        )

    async def close(self) -> None:
        """Close every connection; calls still open end with UNAVAILABLE."""
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        connections, self._connections = self._connections, []
        for connection in connections:
            connection.close()

    async def _connect(self) -> Http2Connection:
        loop = asyncio.get_running_loop()
        try:
            if loop.time() < self._retry_at and self._last_error is not None:
                raise self._last_error
            settings = self.settings
            conn_settings = self._connection_settings
            ssl_context = _ssl_context() if self._tls else None
            try:
                async with asyncio.timeout(settings.connect_timeout_s):
                    _, connection = await loop.create_connection(
                        lambda: Http2Connection(conn_settings, on_lost=self._forget),
                        self._host,
                        self._port,
                        ssl=ssl_context,
                        server_hostname=self._host if ssl_context else None,
                    )
            except (OSError, TimeoutError) as exc:
                reason = str(exc) or type(exc).__name__
                self._last_error = WorkerCallError(
                    grpc.StatusCode.UNAVAILABLE, f"cannot connect: {reason}", worker=self.worker
                )
                self._retry_at = loop.time() + self._backoff
                self._backoff = min(self._backoff * 2, settings.max_reconnect_backoff_s)
                raise self._last_error from None
            if self._closed:
                connection.close()
                raise ClientClosed(worker=self.worker)
            self._backoff = _INITIAL_BACKOFF_S
            self._last_error = None
            self._connections.append(connection)
            return connection
        finally:
            self._connecting = None

    def _forget(self, connection: Http2Connection) -> None:
        if connection in self._connections:
            self._connections.remove(connection)


#: Each response class's parser, bound once (not once per call).
_PARSERS: dict[MessageType, Callable[[bytes], Any]] = {}


def _parser(response_type: MessageType) -> Callable[[bytes], Any]:
    parse = _PARSERS.get(response_type)
    if parse is None:
        parse = response_type.FromString
        if isinstance(response_type, type):  # a per-call deserializer object is not kept
            _PARSERS[response_type] = parse
    return parse


def _timeout_header(seconds: float) -> str:
    """``grpc-timeout`` value: at most 8 digits and a unit."""
    millis = max(math.ceil(seconds * 1000), 1)
    if millis < 100_000_000:
        return f"{millis}m"
    return f"{min(math.ceil(seconds), 99_999_999)}S"


def _ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.set_alpn_protocols(["h2"])
    return context
