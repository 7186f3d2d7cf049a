"""The server side of an HTTP/2 connection (RFC 9113), as much as a gRPC server needs.

Why: the simulated worker's ``grpc.aio`` server spends ~140 µs of CPU per streamed message,
most of it in grpcio's poller thread and Cython callbacks; on one machine with the router under
test, that CPU is taken from the router. Here a message costs one protobuf serialization, one
frame header and a share of one ``transport.write``.

What a stream sends during one loop turn is queued and written in one ``transport.write`` at
the end of the turn (``call_soon``), so the messages of many streams share a syscall.

Flow control: what the peer sends is credited back as it arrives (a request is one bounded
message, buffered whole). What we send respects the peer's connection and stream windows and
its ``SETTINGS_MAX_FRAME_SIZE``; a stream that cannot send holds its message until the windows
open (``ServerStream.pending``) and its producer waits (``wait_writable``), so a reader that
stops costs one message per stream. The transport's own write buffer pauses every stream
(``pause_writing``). No server push, no priorities, no compression. HPACK decoding (Huffman,
dynamic table) is ``turnout.wire.header_codec``'s; what we encode never uses the dynamic table.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Final, Protocol, cast

import hpack

from turnout.wire.h2frames import (
    ACK,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_SIZE,
    DEFAULT_WINDOW,
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
from turnout.wire.header_codec import HeaderDecoder, Headers

__all__ = ["H2ServerConnection", "ServerSettings", "ServerStream", "StreamCall"]

#: The largest frame we accept (announced): fewer frames for a large request.
OUR_MAX_FRAME: Final = 1024 * 1024

#: A DATA frame header followed by a gRPC message prefix (not compressed, length).
_MESSAGE_HEADER: Final = struct.Struct(">BHBBIBI")


class ServerSettings:
    """What a server connection announces and accepts (bytes and counts)."""

    __slots__ = ("connection_window", "max_body", "max_concurrent_streams", "stream_window")

    def __init__(
        self,
        *,
        stream_window: int = 1024 * 1024,
        connection_window: int = 16 * 1024 * 1024,
        max_concurrent_streams: int = 16_384,
        max_body: int = 256 * 1024 * 1024 + 5,
    ) -> None:
        if not DEFAULT_WINDOW <= stream_window <= MAX_WINDOW:
            raise ValueError(f"stream window must be {DEFAULT_WINDOW}..{MAX_WINDOW} bytes")
        if not DEFAULT_WINDOW <= connection_window <= MAX_WINDOW:
            raise ValueError(f"connection window must be {DEFAULT_WINDOW}..{MAX_WINDOW} bytes")
        self.stream_window = stream_window
        self.connection_window = connection_window
        self.max_concurrent_streams = max_concurrent_streams
        #: Request body bytes buffered per stream; beyond, the stream is dispatched ``overflow``.
        self.max_body = max_body


class StreamCall(Protocol):
    """What the connection tells the code serving a stream (the gRPC call)."""

    def on_reset(self, error_code: int) -> None:
        """The peer reset the stream, or the connection is gone: stop serving it."""


class ServerStream:
    """One request stream: what the peer sent, and what waits to be sent on it."""

    __slots__ = (
        "body",
        "call",
        "closed",
        "ended",
        "headers",
        "headers_sent",
        "id",
        "overflow",
        "pending",
        "trailers",
        "waiter",
        "window",
    )

    def __init__(self, stream_id: int, headers: Headers, window: int) -> None:
        self.id = stream_id
        self.headers = headers
        self.body = bytearray()
        #: The peer ended its half (END_STREAM): the request is complete.
        self.ended = False
        #: The request body exceeded ``ServerSettings.max_body`` (the rest was dropped).
        self.overflow = False
        #: Nothing more may be sent: we ended it, the peer reset it, or the connection is gone.
        self.closed = False
        self.headers_sent = False
        #: Send window (what the peer lets us send on this stream).
        self.window = window
        #: Bytes (gRPC-framed messages) waiting for send window, then trailers to end with.
        self.pending = bytearray()
        self.trailers: bytes | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.call: StreamCall | None = None


class H2ServerConnection(asyncio.Protocol):
    """One server HTTP/2 connection; ``on_request(connection, stream)`` is called once a
    stream's request is complete (or overflowed), and the callee answers through
    ``send_headers`` / ``send_message`` / ``send_trailers``."""

    def __init__(
        self,
        on_request: Callable[[H2ServerConnection, ServerStream], None],
        settings: ServerSettings | None = None,
        on_lost: Callable[[H2ServerConnection], None] | None = None,
    ) -> None:
        self.settings = settings or ServerSettings()
        self._on_request = on_request
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.peer = ""
        self._buffer = bytearray()
        self._preface_seen = False
        self._out: list[bytes | bytearray | memoryview] = []
        self._write_scheduled = False
        self._decoder = HeaderDecoder()
        self.streams: dict[int, ServerStream] = {}
        self._last_stream_id = 0
        self._header_stream = 0
        self._header_flags = 0
        self._header_block = bytearray()
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_max_frame = DEFAULT_FRAME_SIZE
        self._send_window = DEFAULT_WINDOW
        #: Streams holding pending bytes, in the order they started waiting.
        self._blocked: dict[int, ServerStream] = {}
        self._recv_uncredited = 0
        self._threshold = self.settings.connection_window // 2
        self._paused = False
        self._paused_waiters: list[asyncio.Future[None]] = []
        self._goaway_sent = False

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's do not subclass it
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"ipv{6 if ':' in str(peer[0]) else 4}:{peer[0]}:{peer[1]}"
        ours = self.settings
        payload = b"".join(
            SETTING.pack(key, value)
            for key, value in (
                (MAX_CONCURRENT_STREAMS, ours.max_concurrent_streams),
                (INITIAL_WINDOW_SIZE, ours.stream_window),
                (MAX_FRAME_SIZE, OUR_MAX_FRAME),
            )
        )
        out = frame(SETTINGS, 0, 0, payload)
        increment = ours.connection_window - DEFAULT_WINDOW
        if increment:
            out += frame(WINDOW_UPDATE, 0, 0, U32.pack(increment))
        transport.write(out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        streams, self.streams = self.streams, {}
        self._blocked.clear()
        for stream in streams.values():
            self._close_stream(stream, notify=ErrorCode.CANCEL)
        self._wake_paused()
        if self._on_lost is not None:
            self._on_lost(self)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_paused()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer:
            buffer += data
            view: bytes | bytearray = buffer
        else:
            view = data
        size = len(view)
        pos = 0
        try:
            if not self._preface_seen:
                if size < len(PREFACE):
                    if not PREFACE.startswith(bytes(view)):
                        raise ProtocolError(
                            ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 client preface"
                        )
                    if not buffer:
                        buffer += data
                    return
                if view[: len(PREFACE)] != PREFACE:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 client preface")
                self._preface_seen = True
                pos = len(PREFACE)
            while size - pos >= 9:
                high, low, kind, flags, stream_id = FRAME_HEADER.unpack_from(view, pos)
                length = (high << 16) | low
                end = pos + 9 + length
                if length > OUR_MAX_FRAME:
                    raise ProtocolError(
                        ErrorCode.FRAME_SIZE_ERROR, "frame larger than MAX_FRAME_SIZE"
                    )
                if end > size:
                    break
                stream_id &= STREAM_ID_MASK
                if self._header_stream and kind != CONTINUATION:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "header block interrupted")
                if kind == DATA:
                    self._on_data(stream_id, flags, view[pos + 9 : end])
                else:
                    self._on_control(kind, flags, stream_id, bytes(view[pos + 9 : end]))
                pos = end
        except ProtocolError as exc:
            self._fail_connection(exc.code, str(exc))
            return
        if buffer:
            del buffer[:pos]
        elif pos < size:
            buffer += data[pos:]

    # -- sending -------------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """False while the transport's write buffer is full (every stream waits)."""
        return not self._paused

    def send_headers(self, stream: ServerStream, block: bytes, end_stream: bool = False) -> None:
        """Queue a header block (response headers; trailers when ``end_stream``)."""
        if stream.closed:
            return
        out = self._outbox()
        limit = self._peer_max_frame
        flags = END_STREAM if end_stream else 0
        if len(block) <= limit:
            out.append(
                FRAME_HEADER.pack(
                    len(block) >> 16, len(block) & 0xFFFF, HEADERS, flags | END_HEADERS, stream.id
                )
            )
            out.append(block)
        else:
            first, rest = block[:limit], block[limit:]
            out.append(frame(HEADERS, flags, stream.id, first))
            while rest:
                piece, rest = rest[:limit], rest[limit:]
                out.append(frame(CONTINUATION, 0 if rest else END_HEADERS, stream.id, piece))
        if end_stream:
            self._finish(stream)

    def send_message(self, stream: ServerStream, message: bytes) -> bool:
        """Queue one gRPC message (serialized, without its 5-byte prefix) in a DATA frame.

        False when it could not all be sent now (no window, or the transport is paused): the
        rest waits on the stream, and the caller must ``await wait_writable(stream)`` before
        the next message (or drop it when ``stream.closed``)."""
        if stream.closed:
            return False
        size = len(message) + 5
        window = stream.window
        if (
            not stream.pending
            and size <= window
            and size <= self._send_window
            and size <= self._peer_max_frame
        ):
            stream.window = window - size
            self._send_window -= size
            out = self._outbox()
            out.append(
                _MESSAGE_HEADER.pack(size >> 16, size & 0xFFFF, DATA, 0, stream.id, 0, size - 5)
            )
            out.append(message)
            return not self._paused
        stream.pending += U32.pack(size - 5).rjust(5, b"\x00")
        stream.pending += message
        self._blocked[stream.id] = stream
        self._flush(stream)
        return not stream.pending and not self._paused

    def send_trailers(self, stream: ServerStream, block: bytes) -> None:
        """End the stream with trailers (after whatever is still pending on it)."""
        if stream.closed:
            return
        if stream.pending:
            stream.trailers = block
            return
        self.send_headers(stream, block, end_stream=True)

    def reset(self, stream: ServerStream, error_code: int = ErrorCode.CANCEL) -> None:
        """Abandon a stream (RST_STREAM)."""
        if stream.closed:
            return
        self._outbox().append(frame(RST_STREAM, 0, stream.id, U32.pack(error_code)))
        self.streams.pop(stream.id, None)
        self._close_stream(stream, notify=None)
        self._maybe_done()

    async def wait_writable(self, stream: ServerStream) -> bool:
        """Wait until the stream may send again (nothing pending, transport not paused) or is
        closed; False when it is closed."""
        while not stream.closed and (stream.pending or self._paused):
            waiter = self._loop.create_future()
            if stream.pending:
                stream.waiter = waiter
            else:
                self._paused_waiters.append(waiter)
            try:
                await waiter
            finally:
                if stream.waiter is waiter:
                    stream.waiter = None
        return not stream.closed

    def goaway(self) -> None:
        """Refuse new streams (GOAWAY naming the last one accepted); the connection closes
        once its streams are done."""
        if self._goaway_sent or self._transport is None:
            return
        self._goaway_sent = True
        payload = U32.pack(self._last_stream_id) + U32.pack(ErrorCode.NO_ERROR)
        self._outbox().append(frame(GOAWAY, 0, 0, payload))
        self._maybe_done()

    def abort(self) -> None:
        """Drop the connection now (its streams are reset)."""
        transport = self._transport
        if transport is not None:
            self._write_out()
            transport.abort()

    def _outbox(self) -> list[bytes | bytearray | memoryview]:
        if not self._write_scheduled:
            self._write_scheduled = True
            self._loop.call_soon(self._write_out)
        return self._out

    def _write_out(self) -> None:
        self._write_scheduled = False
        out = self._out
        if not out:
            return
        data = b"".join(out)
        out.clear()
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def _flush(self, stream: ServerStream) -> None:
        """Send what the windows allow of a stream's pending bytes (then its trailers)."""
        pending = stream.pending
        out = self._outbox()
        sent = 0
        size = len(pending)
        while sent < size:
            room = min(self._send_window, stream.window, self._peer_max_frame, size - sent)
            if room <= 0:
                break
            out.append(frame(DATA, 0, stream.id, bytes(pending[sent : sent + room])))
            sent += room
            self._send_window -= room
            stream.window -= room
        if sent:
            del pending[:sent]
        if pending:
            return
        self._blocked.pop(stream.id, None)
        trailers, stream.trailers = stream.trailers, None
        if trailers is not None:
            self.send_headers(stream, trailers, end_stream=True)
        waiter = stream.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _flush_blocked(self) -> None:
        for stream in list(self._blocked.values()):
            if self._send_window <= 0:
                break
            self._flush(stream)

    def _finish(self, stream: ServerStream) -> None:
        """We ended the stream; if the peer has not ended its half, it need not (RFC 9113
        §8.1: RST_STREAM ErrorCode.NO_ERROR)."""
        self.streams.pop(stream.id, None)
        if not stream.ended:
            self._outbox().append(frame(RST_STREAM, 0, stream.id, U32.pack(ErrorCode.NO_ERROR)))
        self._close_stream(stream, notify=None)
        self._maybe_done()

    def _close_stream(self, stream: ServerStream, notify: int | None) -> None:
        stream.closed = True
        stream.pending.clear()
        stream.trailers = None
        self._blocked.pop(stream.id, None)
        waiter = stream.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        call = stream.call
        if notify is not None and call is not None:
            call.on_reset(notify)

    def _wake_paused(self) -> None:
        waiters, self._paused_waiters = self._paused_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _maybe_done(self) -> None:
        if self._goaway_sent and not self.streams and self._transport is not None:
            self._write_out()
            self._transport.close()

    # -- receiving -----------------------------------------------------------------------------

    def _on_data(self, stream_id: int, flags: int, payload: bytes | bytearray) -> None:
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA on stream 0")
        flow_size = len(payload)
        if flow_size:
            # Credit on arrival: a request is one message, bounded by ``max_body``.
            uncredited = self._recv_uncredited + flow_size
            if uncredited >= self._threshold:
                self._outbox().append(frame(WINDOW_UPDATE, 0, 0, U32.pack(uncredited)))
                uncredited = 0
            self._recv_uncredited = uncredited
        stream = self.streams.get(stream_id)
        if stream is None or stream.ended or stream.call is not None:
            if stream is None and stream_id > self._last_stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream")
            return  # closed or answered already: frames in flight
        if flags & PADDED:
            payload = strip_padding(payload)
        body = stream.body
        body += payload
        if len(body) > self.settings.max_body:
            stream.overflow = True
            body.clear()
            self._dispatch(stream)
            return
        if flags & END_STREAM:
            stream.ended = True
            self._dispatch(stream)
        elif flow_size:
            # The stream's window too: the body is bounded by ``max_body``, not by the window.
            self._outbox().append(frame(WINDOW_UPDATE, 0, stream_id, U32.pack(flow_size)))

    def _on_control(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if kind == HEADERS:
            self._on_headers(stream_id, flags, payload)
        elif kind == WINDOW_UPDATE:
            self._on_window_update(stream_id, payload)
        elif kind == RST_STREAM:
            self._on_rst_stream(stream_id, payload)
        elif kind == CONTINUATION:
            self._on_continuation(stream_id, flags, payload)
        elif kind == SETTINGS:
            self._on_settings(stream_id, flags, payload)
        elif kind == PING:
            if len(payload) != 8 or stream_id:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad PING")
            if not flags & ACK:
                self._outbox().append(frame(PING, ACK, 0, payload))
        elif kind == GOAWAY:
            pass  # the client opens no more streams; those it has run to their end
        elif kind == PUSH_PROMISE:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a client cannot push")
        # PRIORITY and unknown frame types are ignored (RFC 9113 §5.3.2, §5.5).

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
        if stream_id != self._header_stream or not stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "unexpected CONTINUATION")
        self._header_block += payload
        if len(self._header_block) > 1024 * 1024:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "header block too large")
        if flags & END_HEADERS:
            block, self._header_block = bytes(self._header_block), bytearray()
            self._header_stream = 0
            self._finish_header_block(stream_id, self._header_flags, block)

    def _finish_header_block(self, stream_id: int, flags: int, block: bytes) -> None:
        try:
            headers = self._decoder.decode(block)  # always: HPACK state is per connection
        except hpack.HPACKError as exc:
            raise ProtocolError(ErrorCode.COMPRESSION_ERROR, f"bad header block: {exc}") from None
        end = bool(flags & END_STREAM)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers from the client
            if not end:
                raise ProtocolError(
                    ErrorCode.PROTOCOL_ERROR, "second header block without END_STREAM"
                )
            if not stream.ended and stream.call is None:
                stream.ended = True
                self._dispatch(stream)
            return
        if stream_id <= self._last_stream_id:
            return  # a stream closed already
        if not stream_id & 1:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "a client stream id must be odd")
        self._last_stream_id = stream_id
        stream = ServerStream(stream_id, headers, self._peer_initial_window)
        if self._goaway_sent or len(self.streams) >= self.settings.max_concurrent_streams:
            self._outbox().append(
                frame(RST_STREAM, 0, stream_id, U32.pack(ErrorCode.REFUSED_STREAM))
            )
            return
        self.streams[stream_id] = stream
        if end:
            stream.ended = True
            self._dispatch(stream)

    def _dispatch(self, stream: ServerStream) -> None:
        self._on_request(self, stream)
        if stream.call is None and not stream.closed:
            stream.call = _ANSWERED  # answered at once, or refused: later DATA is dropped

    def _on_settings(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            return
        if len(payload) % 6:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "bad SETTINGS length")
        for offset in range(0, len(payload), 6):
            key, value = SETTING.unpack_from(payload, offset)
            # HEADER_TABLE_SIZE needs nothing: what we encode never uses the dynamic table.
            if key == INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "window too large")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self.streams.values():
                    stream.window += delta
            elif key == MAX_FRAME_SIZE:
                if not DEFAULT_FRAME_SIZE <= value <= 16_777_215:
                    raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "bad MAX_FRAME_SIZE")
                self._peer_max_frame = value
        self._outbox().append(frame(SETTINGS, ACK, 0, b""))
        self._flush_blocked()

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "bad WINDOW_UPDATE length")
        increment = U32.unpack(payload)[0] & MAX_WINDOW
        if stream_id == 0:
            if not increment:
                raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise ProtocolError(ErrorCode.FLOW_CONTROL_ERROR, "connection window overflow")
            if self._blocked:
                self._flush_blocked()
            return
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        if not increment or stream.window + increment > MAX_WINDOW:
            self.reset(
                stream, ErrorCode.PROTOCOL_ERROR if not increment else ErrorCode.FLOW_CONTROL_ERROR
            )
            return
        stream.window += increment
        if stream.pending:
            self._flush(stream)

    def _on_rst_stream(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(ErrorCode.FRAME_SIZE_ERROR, "bad RST_STREAM length")
        if stream_id == 0:
            raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on stream 0")
        stream = self.streams.pop(stream_id, None)
        if stream is None:
            return
        self._close_stream(stream, notify=U32.unpack(payload)[0])
        self._maybe_done()

    def _fail_connection(self, error_code: int, message: str) -> None:
        transport = self._transport
        if transport is None:
            return
        payload = U32.pack(self._last_stream_id) + U32.pack(error_code) + message.encode()[:256]
        self._out.append(frame(GOAWAY, 0, 0, payload))
        self._write_out()
        transport.close()


class _Answered:
    def on_reset(self, error_code: int) -> None:
        pass


_ANSWERED: Final = _Answered()
