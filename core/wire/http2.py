"""A small HTTP/2 client connection (RFC 9113), just what gRPC calls to a worker need.

Why not grpcio here: ``grpc.aio`` hands every received message from its own poller thread to the
event loop, which costs ~30 µs of CPU per streamed token; reading frames straight off an asyncio
transport costs a few µs, and several frames that arrive together are handled in one wake-up.

Frames are not written one by one: what the connection's streams send during one turn of the
event loop (WINDOW_UPDATEs, RST_STREAMs, PING ACKs) is queued and written in one
``transport.write`` by a callback scheduled with ``call_soon``, so under load they share one
syscall. A new call's request is the exception: it is written at once (with whatever was queued
before it). A ``call_soon`` callback runs only after everything already queued on the loop and
the next poll for I/O, which on a busy router is a whole turn of other streams' steps: a call
queued there reached the worker p50 3 ms, p99 33 ms later (c=32 streaming), all of it added to
the time to first token.

Scope: client side only, no server push, no priorities, no compression. Flow control of what we
receive is split: the connection window is credited as data arrives (so one stream that is not
read never blocks the others), each stream's window only as its handler reports the data consumed
(``consume``), so a stream whose reader stalls stops its sender after one stream window. HPACK
comes from the ``hpack`` package (``turnout.wire.header_codec``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, cast

import hpack

from turnout.wire.h2frames import (
    ACK,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_SIZE,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    FRAME_HEADER,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PUSH_PROMISE,
    RST_STREAM,
    SETTING,
    SETTINGS,
    STREAM_ID_MASK,
    U32,
    WINDOW_UPDATE,
    ErrorCode,
    ProtocolError,
    frame,
    strip_padding,
)
from turnout.wire.header_codec import HeaderDecoder, HeaderEncoder, Headers

__all__ = [
    "ConnectionSettings",
    "ErrorCode",
    "Http2Connection",
    "StreamHandler",
]


class StreamHandler(Protocol):
    """What a connection reports about one stream (implemented by the gRPC call)."""

    def on_headers(self, headers: Headers, end_stream: bool) -> None:
        """A complete header block (response headers, or trailers when ``end_stream``)."""

    def on_data(self, data: bytes, end_stream: bool) -> None:
        """Body bytes, in order, split at arbitrary points."""

    def on_reset(self, error_code: int) -> None:
        """The peer reset the stream (RST_STREAM)."""

    def on_closed(self, reason: str, refused: bool) -> None:
        """The connection is gone; ``refused``: the peer never processed the stream."""


class ConnectionSettings:
    """Knobs of one connection (seconds and bytes).

    One instance may be shared by the successive connections to a peer: what a connection learns
    (a longer keep-alive interval after ENHANCE_YOUR_CALM) then holds for the next ones too.
    """

    __slots__ = (
        "connection_window",
        "keepalive_time_s",
        "keepalive_timeout_s",
        "max_frame_size",
        "stream_window",
    )

    def __init__(
        self,
        *,
        keepalive_time_s: float = 30.0,
        keepalive_timeout_s: float = 10.0,
        stream_window: int = 1024 * 1024,
        connection_window: int = 16 * 1024 * 1024,
        max_frame_size: int = 1024 * 1024,
    ) -> None:
        if not DEFAULT_WINDOW <= stream_window <= MAX_WINDOW:
            raise ValueError(f"stream window must be {DEFAULT_WINDOW}..{MAX_WINDOW} bytes")
        if not DEFAULT_WINDOW <= connection_window <= MAX_WINDOW:
            raise ValueError(f"connection window must be {DEFAULT_WINDOW}..{MAX_WINDOW} bytes")
        self.keepalive_time_s = keepalive_time_s
        self.keepalive_timeout_s = keepalive_timeout_s
        #: What a peer may send on one stream before its reader consumed it.
        self.stream_window = stream_window
        #: What a peer may send on the whole connection before we credit it (on arrival).
        self.connection_window = connection_window
        self.max_frame_size = max_frame_size


class _Outgoing:
    """Body bytes of one stream still waiting for send window."""

    __slots__ = ("data", "end")

    def __init__(self, data: bytes, end: bool) -> None:
        self.data = memoryview(data)
        self.end = end


class Http2Connection(asyncio.Protocol):
    """One client HTTP/2 connection carrying many concurrent streams.

    Create it through ``loop.create_connection(lambda: Http2Connection(...), …)``; then
    ``open_stream`` sends a request and routes everything the peer says about that stream to its
    ``StreamHandler``. ``usable`` tells whether new streams may still be opened.
    """

    def __init__(
        self,
        settings: ConnectionSettings | None = None,
        on_lost: Callable[[Http2Connection], None] | None = None,
    ) -> None:
        self.settings = settings or ConnectionSettings()
        self._on_lost = on_lost
        self._transport: asyncio.Transport | None = None
        self._loop = asyncio.get_running_loop()
        self._buffer = bytearray()
        #: Frames (and frame parts) to write at the end of this loop turn, in order.
        self._out: list[bytes | memoryview] = []
        self._write_scheduled = False
        self._encoder = HeaderEncoder()
        self._decoder = HeaderDecoder()
        self._streams: dict[int, StreamHandler] = {}
        self._next_stream_id = 1
        self._closed_reason = ""
        self._goaway = False
        # Header block being assembled from HEADERS + CONTINUATION frames.
        self._header_stream = 0
        self._header_flags = 0
        self._header_block = bytearray()
        # Flow control: what we may send, and what we received but did not yet credit back.
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_max_frame = DEFAULT_FRAME_SIZE
        self._peer_max_streams = 2**31
        self._send_window = DEFAULT_WINDOW
        self._stream_send_windows: dict[int, int] = {}
        self._outgoing: dict[int, _Outgoing] = {}
        # The connection's WINDOW_UPDATEs are sent once half its window is due (not per frame):
        # ``_receivable`` bytes more may arrive before the next one.
        self._connection_threshold = self.settings.connection_window // 2
        self._receivable = self._connection_threshold
        # Keep-alive: a PING when streams wait and the peer has been silent for too long.
        #: Whether anything arrived since the last keep-alive check.
        self._heard = False
        self._ping_deadline: asyncio.TimerHandle | None = None
        self._keepalive_timer: asyncio.TimerHandle | None = None

    # -- state ---------------------------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """True while new streams may be opened on this connection."""
        return (
            self._transport is not None
            and not self._closed_reason
            and not self._goaway
            and self._next_stream_id < STREAM_ID_MASK
            and len(self._streams) < self._peer_max_streams
        )

    @property
    def closed(self) -> bool:
        """True once the connection is gone (it never comes back)."""
        return bool(self._closed_reason)

    @property
    def active_streams(self) -> int:
        """Streams opened and not yet ended."""
        return len(self._streams)

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast("asyncio.Transport", transport)
        self._transport = transport
        self._heard = True
        ours = self.settings
        payload = b"".join(
            SETTING.pack(key, value)
            for key, value in (
                (ENABLE_PUSH, 0),
                (INITIAL_WINDOW_SIZE, ours.stream_window),
                (MAX_FRAME_SIZE, ours.max_frame_size),
            )
        )
        preface = PREFACE + frame(SETTINGS, 0, 0, payload)
        increment = ours.connection_window - DEFAULT_WINDOW
        if increment:
            preface += frame(WINDOW_UPDATE, 0, 0, U32.pack(increment))
        transport.write(preface)
        self._schedule_keepalive()

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f"connection lost: {exc}" if exc else "connection closed by the worker"
        self._shut(reason)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        buffer = self._buffer
        if buffer:
            # The rest of a frame that came in pieces: parsed once it is whole, the buffer
            # copied into one bytes object (once per read that completes a frame).
            buffer += data
            if len(buffer) < 9 or len(buffer) < 9 + int.from_bytes(buffer[:3], "big"):
                return
            data = bytes(buffer)
            buffer.clear()
        size = len(data)
        pos = 0
        received = 0  # DATA bytes of this read, counted against the connection window at its end
        try:
            while size - pos >= 9:
                high, low, kind, flags, stream_id = FRAME_HEADER.unpack_from(data, pos)
                start = pos + 9
                pos = start + ((high << 16) | low)
                if pos > size:
                    pos = start - 9
                    break
                if kind:  # not DATA (0)
                    self._on_control(kind, flags, stream_id & STREAM_ID_MASK, data[start:pos])
                    continue
                # DATA, the frame of every response message: handled here, without a call.
                stream_id &= STREAM_ID_MASK
                if self._header_stream or not stream_id:
                    self._bad_data()
                received += pos - start
                if flags:  # END_STREAM or PADDED (or a flag DATA does not define)
                    self._on_flagged_data(stream_id, flags, data[start:pos])
                    continue
                handler = self._streams.get(stream_id)
                if handler is not None:  # None: reset by us, frames still in flight
                    handler.on_data(data[start:pos], False)
        except ProtocolError as exc:
            self._fail_connection(exc.code, str(exc))
            return
        left = self._receivable - received
        if left > 0:
            self._receivable = left
        else:
            self._credit_connection(left)
        if pos < size:
            buffer += data[pos:]

    # -- sending -------------------------------------------------------------------------------

    def open_stream(
        self,
        handler: StreamHandler,
        headers: list[tuple[str, str]],
        body: bytes,
        encoded: bytes = b"",
    ) -> int:
        """Send a request (header block, then ``body`` ending the stream); returns its id.
        ``encoded``: header fields already encoded (``header_codec.encode_fields``), sent
        before ``headers``."""
        transport = self._transport
        if transport is None or not self.usable:
            raise ConnectionError(self._closed_reason or "connection not usable")
        stream_id = self._next_stream_id
        self._next_stream_id += 2
        self._streams[stream_id] = handler
        block = self._encoder.encode(headers, encoded)
        limit = self._peer_max_frame
        first, rest = block[:limit], block[limit:]
        out = self._out  # written below, at once: no end-of-turn callback needed
        out += _frame_parts(HEADERS, 0 if rest else END_HEADERS, stream_id, first)
        while rest:
            piece, rest = rest[:limit], rest[limit:]
            out += _frame_parts(CONTINUATION, 0 if rest else END_HEADERS, stream_id, piece)
        size = len(body)
        window = self._peer_initial_window
        if size <= self._send_window and size <= window and size <= self._peer_max_frame:
            # The whole body fits in one DATA frame now (as nearly every request does).
            self._send_window -= size
            self._stream_send_windows[stream_id] = window - size
            out += _frame_parts(DATA, END_STREAM, stream_id, body)
        else:
            self._stream_send_windows[stream_id] = window
            self._outgoing[stream_id] = _Outgoing(body, end=True)
            self._flush(stream_id, out)
        self._write_out()  # a request goes out at once (see the module doc)
        return stream_id

    def reset_stream(self, stream_id: int, error_code: int = ErrorCode.CANCEL) -> None:
        """Abandon a stream (RST_STREAM); its handler is told nothing more."""
        if self._streams.pop(stream_id, None) is None:
            return
        self._forget(stream_id)
        if self._transport is not None and not self._closed_reason:
            self._outbox().append(frame(RST_STREAM, 0, stream_id, U32.pack(error_code)))
        self._maybe_finish_goaway()

    def close(self) -> None:
        """Close now: GOAWAY, then the socket; open streams are told the connection closed."""
        transport = self._transport
        if transport is not None and not self._closed_reason:
            self._outbox().append(frame(GOAWAY, 0, 0, U32.pack(0) + U32.pack(ErrorCode.NO_ERROR)))
            self._write_out()
            transport.close()
        self._shut("connection closed by the client")

    def _outbox(self) -> list[bytes | memoryview]:
        """The frames to write at the end of this loop turn; append to it to send."""
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._end_of_turn_write)
        return self._out

    def _end_of_turn_write(self) -> None:
        self._write_scheduled = False
        self._write_out()

    def _write_out(self) -> None:
        """Write every queued frame now, in one ``transport.write`` (one syscall)."""
        out = self._out
        if not out:
            return
        data = b"".join(out)
        out.clear()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def _flush(self, stream_id: int, out: list[bytes | memoryview] | None = None) -> None:
        """Send as much of a stream's pending body as both send windows allow (queued on
        ``out``, the outbox by default)."""
        pending = self._outgoing.get(stream_id)
        if pending is None or self._transport is None:
            return
        if out is None:
            out = self._outbox()
        data = pending.data
        if not data and pending.end:
            out += _frame_parts(DATA, END_STREAM, stream_id, b"")
        while data:
            window = min(self._send_window, self._stream_send_windows[stream_id])
            size = min(len(data), window, self._peer_max_frame)
            if size <= 0:
                break
            chunk, data = data[:size], data[size:]
            self._send_window -= size
            self._stream_send_windows[stream_id] -= size
            flags = END_STREAM if pending.end and not data else 0
            out += _frame_parts(DATA, flags, stream_id, chunk)
        pending.data = data
        if not data:
            del self._outgoing[stream_id]

    # -- receiving -----------------------------------------------------------------------------

    def _bad_data(self) -> None:
        """Raises for a DATA frame inside a header block or on stream 0."""
        if self._header_stream:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "header block interrupted")
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")

    def _on_flagged_data(self, stream_id: int, flags: int, payload: bytes) -> None:
        """A DATA frame with flags: padded (the padding is credited back at once: nobody else
        holds it), or the last of its stream."""
        if flags & PADDED:
            data = strip_padding(payload)
            self.consume(stream_id, len(payload) - len(data))
            payload = data
        handler = self._streams.get(stream_id)
        if handler is None:
            return  # reset by us, frames still in flight
        end = bool(flags & END_STREAM)
        if end:
            self._end_stream(stream_id)
        handler.on_data(payload, end)

    def _credit_connection(self, left: int) -> None:
        """Half the connection window (and ``-left`` bytes more) was received since the last
        WINDOW_UPDATE of the connection: credit it back."""
        if self._transport is not None:
            increment = self._connection_threshold - left
            self._outbox().append(frame(WINDOW_UPDATE, 0, 0, U32.pack(increment)))
        self._receivable = self._connection_threshold

    def consume(self, stream_id: int, size: int) -> None:
        """The handler of ``stream_id`` is done with ``size`` received bytes: credit them back
        to the stream's window now, in one WINDOW_UPDATE (a handler gathers its credit into
        large steps: ``NativeCall`` sends it once half a window is due)."""
        if size and stream_id in self._streams and self._transport and not self._closed_reason:
            self._outbox().append(frame(WINDOW_UPDATE, 0, stream_id, U32.pack(size)))

    def _on_control(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._header_stream and kind != CONTINUATION:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "header block interrupted")
        # Most frequent first: two header blocks per call, and a grpc worker credits back
        # (WINDOW_UPDATE) nearly every request it receives.
        if kind == HEADERS:
            self._on_headers(stream_id, flags, payload)
        elif kind == WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == CONTINUATION:
            self._on_continuation(stream_id, flags, payload)
        elif kind == SETTINGS:
            self._on_settings(flags, payload)
        elif kind == RST_STREAM:
            self._on_rst_stream(stream_id, payload)
        elif kind == PING:
            self._on_ping(flags, payload)
        elif kind == GOAWAY:
            self._on_goaway(payload)
        elif kind == PUSH_PROMISE:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "push is disabled")
        # PRIORITY and unknown frame types are ignored (RFC 9113 §4.1, §5.5).

    def _on_headers(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & PADDED:
            payload = strip_padding(payload)
        if flags & PRIORITY:
            payload = payload[5:]
        if flags & END_HEADERS:
            self._finish_header_block(stream_id, flags, payload)
            return
        self._header_stream = stream_id
        self._header_flags = flags
        self._header_block = bytearray(payload)

    def _on_continuation(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id != self._header_stream:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "unexpected CONTINUATION")
        self._header_block += payload
        if flags & END_HEADERS:
            block, self._header_block = bytes(self._header_block), bytearray()
            self._header_stream = 0
            self._finish_header_block(stream_id, self._header_flags, block)

    def _finish_header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        try:
            # Always decode, even for a stream we reset: HPACK state is per connection.
            headers = self._decoder.decode(block)
        except hpack.HPACKError as exc:
            raise ProtocolError(ErrorCode.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        handler = self._streams.get(stream_id)
        if handler is None:
            return
        end = bool(flags & END_STREAM)
        if end:
            self._end_stream(stream_id)
        handler.on_headers(headers, end)

    def _on_settings(self, flags: int, payload: bytes) -> None:
        if flags & ACK:
            return
        if len(payload) % 6:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad SETTINGS length")
        for offset in range(0, len(payload), 6):
            key, value = SETTING.unpack_from(payload, offset)
            # HEADER_TABLE_SIZE needs nothing: our encoder keeps its dynamic table empty.
            if key == MAX_CONCURRENT_STREAMS:
                self._peer_max_streams = value
            elif key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "window too large")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for sid in self._stream_send_windows:
                    self._stream_send_windows[sid] += delta
            elif key == MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_SIZE <= value <= 16_777_215:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad MAX_FRAME_SIZE")
                self._peer_max_frame = value
        self._outbox().append(frame(SETTINGS, ACK, 0, b""))
        for sid in list(self._outgoing):
            self._flush(sid)

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad WINDOW_UPDATE length")
        increment = U32.unpack(payload)[0] & MAX_WINDOW
        if stream_id == 0:
            self._send_window += increment
            if self._outgoing:
                for sid in list(self._outgoing):
                    self._flush(sid)
        elif stream_id in self._stream_send_windows:
            self._stream_send_windows[stream_id] += increment
            self._flush(stream_id)

    def _on_rst_stream(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad RST_STREAM length")
        handler = self._streams.pop(stream_id, None)
        if handler is None:
            return
        self._forget(stream_id)
        handler.on_reset(U32.unpack(payload)[0])
        self._maybe_finish_goaway()

    def _on_ping(self, flags: int, payload: bytes) -> None:
        if len(payload) != 8:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad PING length")
        if flags & ACK:
            if self._ping_deadline is not None:
                self._ping_deadline.cancel()
                self._ping_deadline = None
            return
        self._outbox().append(frame(PING, ACK, 0, payload))

    def _on_goaway(self, payload: bytes) -> None:
        if len(payload) < 8:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad GOAWAY length")
        last_stream = U32.unpack_from(payload, 0)[0] & STREAM_ID_MASK
        error_code = U32.unpack_from(payload, 4)[0]
        debug = payload[8:].decode("utf-8", "replace")
        self._goaway = True
        if error_code == ErrorCode.ENHANCE_YOUR_CALM:
            # "too_many_pings": the worker's policy is stricter than our keep-alive.
            self.settings.keepalive_time_s *= 2
        reason = f"worker sent GOAWAY (code {error_code}{': ' + debug if debug else ''})"
        for stream_id in [sid for sid in self._streams if sid > last_stream]:
            handler = self._streams.pop(stream_id)
            self._forget(stream_id)
            handler.on_closed(reason, refused=True)
        self._maybe_finish_goaway()

    # -- ending --------------------------------------------------------------------------------

    def _end_stream(self, stream_id: int) -> None:
        """The peer ended the stream: it leaves the table (its handler is told by the caller)."""
        del self._streams[stream_id]
        self._forget(stream_id)
        self._maybe_finish_goaway()

    def _forget(self, stream_id: int) -> None:
        self._stream_send_windows.pop(stream_id, None)
        self._outgoing.pop(stream_id, None)

    def _maybe_finish_goaway(self) -> None:
        if self._goaway and not self._streams and self._transport is not None:
            self._write_out()
            self._transport.close()

    def _fail_connection(self, error_code: int, message: str) -> None:
        transport = self._transport
        if transport is not None and not self._closed_reason:
            last = U32.pack(0) + U32.pack(error_code) + message.encode()[:256]
            self._outbox().append(frame(GOAWAY, 0, 0, last))
            self._write_out()
            transport.abort()
        self._shut(f"HTTP/2 protocol error: {message}")

    def _shut(self, reason: str) -> None:
        if self._closed_reason:
            return
        self._closed_reason = reason
        for timer in (self._keepalive_timer, self._ping_deadline):
            if timer is not None:
                timer.cancel()
        streams, self._streams = self._streams, {}
        for handler in streams.values():
            handler.on_closed(reason, refused=False)
        if self._on_lost is not None:
            self._on_lost(self)

    # -- keep-alive ----------------------------------------------------------------------------

    def _schedule_keepalive(self) -> None:
        self._keepalive_timer = self._loop.call_later(
            self.settings.keepalive_time_s, self._keepalive
        )

    def _keepalive(self) -> None:
        if self._closed_reason or self._transport is None:
            return
        # Nothing heard since the last check, a keep-alive interval ago: the peer is silent.
        heard, self._heard = self._heard, False
        if self._streams and not heard and self._ping_deadline is None:
            self._outbox().append(frame(PING, 0, 0, b"turnout\x00"))
            self._ping_deadline = self._loop.call_later(
                self.settings.keepalive_timeout_s, self._ping_timed_out
            )
        self._schedule_keepalive()

    def _ping_timed_out(self) -> None:
        self._ping_deadline = None
        if self._transport is not None:
            self._transport.abort()
        self._shut("worker did not answer a keep-alive PING")


def _frame_parts(
    kind: int, flags: int, stream_id: int, payload: bytes | memoryview
) -> tuple[bytes, bytes | memoryview]:
    """A frame as (header, payload), to be joined with the other frames of a write (the
    payload is copied once, there)."""
    length = len(payload)
    return FRAME_HEADER.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id), payload
