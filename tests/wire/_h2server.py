"""A scripted HTTP/2 (gRPC) server on a loopback socket, for protocol tests of the native client.

It speaks real HTTP/2 through the ``h2`` library, so every frame the client sends is checked by an
independent implementation (a flow-control or stream-limit violation fails the test), while a test
decides, request by request, what goes back: well-formed answers through ``h2``, or raw frames
(padding, CONTINUATION, GOAWAY, garbage) that ``h2`` would never produce on its own.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Final, Self

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from tests.support import eventually as wait_until  # re-exported: the h2 tests import it from here

__all__ = [
    "CONTINUATION",
    "DATA",
    "GOAWAY",
    "HEADERS",
    "PING",
    "PUSH_PROMISE",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "Handler",
    "Request",
    "ScriptedServer",
    "ServerConnection",
    "frame",
    "grpc_message",
    "parse_frames",
    "parse_grpc",
    "wait_until",
]

DATA: Final = 0x0
HEADERS: Final = 0x1
RST_STREAM: Final = 0x3
SETTINGS: Final = 0x4
PUSH_PROMISE: Final = 0x5
PING: Final = 0x6
GOAWAY: Final = 0x7
WINDOW_UPDATE: Final = 0x8
CONTINUATION: Final = 0x9

_END_STREAM: Final = 0x1
_END_HEADERS: Final = 0x4
_PADDED: Final = 0x8
_PRIORITY: Final = 0x20
_FRAME_HEADER: Final = struct.Struct(">BHBBI")

GRPC_OK_HEADERS: Final = ((":status", "200"), ("content-type", "application/grpc"))

Handler = Callable[["Request"], Awaitable[None]]
RawFrame = tuple[int, int, int, bytes]  # type, flags, stream id, payload


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One raw HTTP/2 frame."""
    size = len(payload)
    return _FRAME_HEADER.pack(size >> 16, size & 0xFFFF, kind, flags, stream_id) + payload


def parse_frames(data: bytes) -> tuple[list[RawFrame], bytes]:
    """Complete frames at the start of ``data``, and the bytes left over."""
    frames: list[RawFrame] = []
    pos = 0
    while len(data) - pos >= 9:
        high, low, kind, flags, stream_id = _FRAME_HEADER.unpack_from(data, pos)
        end = pos + 9 + ((high << 16) | low)
        if end > len(data):
            break
        frames.append((kind, flags, stream_id & 0x7FFFFFFF, data[pos + 9 : end]))
        pos = end
    return frames, data[pos:]


def grpc_message(payload: bytes, *, compressed: bool = False, length: int | None = None) -> bytes:
    """A length-prefixed gRPC message (``length`` overrides the announced size)."""
    size = len(payload) if length is None else length
    return bytes([1 if compressed else 0]) + size.to_bytes(4, "big") + payload


def parse_grpc(body: bytes) -> list[bytes]:
    """The messages of a complete gRPC body (asserts it is well formed and uncompressed)."""
    messages: list[bytes] = []
    pos = 0
    while pos < len(body):
        assert body[pos] == 0, "compressed request message"
        size = int.from_bytes(body[pos + 1 : pos + 5], "big")
        assert pos + 5 + size <= len(body), "truncated request message"
        messages.append(body[pos + 5 : pos + 5 + size])
        pos += 5 + size
    return messages


class Request:
    """One request stream as the server sees it, and the ways to answer it."""

    def __init__(self, conn: ServerConnection, stream_id: int, headers: list[tuple[str, str]]):
        self.conn = conn
        self.stream_id = stream_id
        self.header_list = headers
        self.headers = dict(headers)
        self.body = bytearray()
        #: Set once the client ended its side of the stream (the whole request arrived).
        self.complete = asyncio.Event()
        #: Error code of the client's RST_STREAM, once it came.
        self.reset_code: int | None = None

    @property
    def path(self) -> str:
        return self.headers.get(":path", "")

    @property
    def method(self) -> str:
        """The gRPC method name (last part of the path)."""
        return self.path.rpartition("/")[2]

    def messages(self) -> list[bytes]:
        """The request's gRPC messages (the request must be complete)."""
        assert self.complete.is_set(), "request body not complete"
        return parse_grpc(bytes(self.body))

    # -- answering through h2 --------------------------------------------------------------------

    def send_headers(
        self,
        headers: Iterable[tuple[str, str]] = GRPC_OK_HEADERS,
        *,
        end_stream: bool = False,
        pad: int = 0,
        split: int = 1,
        priority: bool = False,
    ) -> None:
        """A header block, optionally with ``pad`` bytes of padding, split into HEADERS and
        ``split - 1`` CONTINUATIONs, and/or with PRIORITY fields (which h2 refuses to send)."""
        conn = self.conn
        conn.flush()
        conn.h2.send_headers(self.stream_id, list(headers), end_stream=end_stream)
        data = conn.h2.data_to_send()
        if pad or split > 1 or priority:
            data = _reshape_headers(data, pad, split, priority)
        conn.write(data)

    def send_data(self, data: bytes, *, end_stream: bool = False, pad: int | None = None) -> None:
        """Body bytes in one DATA frame (optionally padded)."""
        self.conn.h2.send_data(self.stream_id, data, end_stream=end_stream, pad_length=pad)
        self.conn.flush()

    def send_trailers(self, status: int = 0, message: str | None = None, *, split: int = 1) -> None:
        """Trailers ending the stream with ``grpc-status`` (and ``grpc-message``)."""
        trailers = [("grpc-status", str(status))]
        if message is not None:
            trailers.append(("grpc-message", message))
        self.send_headers(trailers, end_stream=True, split=split)

    def reply(self, *payloads: bytes, status: int = 0, message: str | None = None) -> None:
        """A whole answer: headers, one DATA frame per message, trailers."""
        self.send_headers()
        for payload in payloads:
            self.send_data(grpc_message(payload))
        self.send_trailers(status, message)

    def reset(self, error_code: int) -> None:
        """RST_STREAM from the server."""
        self.conn.h2.reset_stream(self.stream_id, error_code)
        self.conn.flush()


def _reshape_headers(data: bytes, pad: int, split: int, priority: bool) -> bytes:
    """Rewrite the single HEADERS frame h2 produced: padding, PRIORITY, CONTINUATIONs."""
    frames, rest = parse_frames(data)
    assert not rest
    assert len(frames) == 1, "expected one HEADERS frame"
    kind, flags, stream_id, block = frames[0]
    assert kind == HEADERS
    assert flags == flags & (_END_STREAM | _END_HEADERS)
    assert flags & _END_HEADERS
    prefix = b""
    if priority:
        flags |= _PRIORITY
        prefix = struct.pack(">IB", 0, 41)  # depends on stream 0, weight 42
    size = -(-len(block) // split)
    pieces = [block[i : i + size] for i in range(0, len(block), size)] or [b""]
    first_flags = flags & ~_END_HEADERS if len(pieces) > 1 else flags
    first = prefix + pieces[0]
    if pad:
        first_flags |= _PADDED
        first = bytes([pad]) + first + bytes(pad)
    out = [frame(HEADERS, first_flags, stream_id, first)]
    for index, piece in enumerate(pieces[1:], start=2):
        out.append(
            frame(CONTINUATION, _END_HEADERS if index == len(pieces) else 0, stream_id, piece)
        )
    return b"".join(out)


class ServerConnection(asyncio.Protocol):
    """The server end of one client connection."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.transport: asyncio.Transport | None = None
        self.requests: dict[int, Request] = {}
        self.events: list[h2.events.Event] = []
        #: h2's verdict when the client broke the protocol.
        self.error: h2.exceptions.ProtocolError | None = None
        #: The client's GOAWAY, if it sent one.
        self.terminated: h2.events.ConnectionTerminated | None = None
        self.ping_acks: list[bytes] = []
        self.pings: list[bytes] = []
        self.settings_acks = 0
        self.closed = asyncio.Event()
        self._frozen = False
        self._frozen_buffer = b""
        #: Frames that arrived after ``freeze()`` (read, never answered).
        self.frozen_frames: list[RawFrame] = []

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.append(self)
        self.h2.initiate_connection()
        if self.server.settings:
            # A second SETTINGS frame: h2 applies it once the client acknowledged it, as the
            # RFC allows the client to use the defaults until then.
            self.h2.update_settings(dict(self.server.settings))
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.closed.set()

    def data_received(self, data: bytes) -> None:
        if self._frozen:
            frames, self._frozen_buffer = parse_frames(self._frozen_buffer + data)
            self.frozen_frames += frames
            return
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            self.error = exc
            self.server.errors.append(f"client broke the protocol: {exc!r}")
            self.flush()
            self.drop()
            return
        for event in events:
            self.events.append(event)
            self._on_event(event)
        self.flush()

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            headers = [(str(k), str(v)) for k, v in event.headers or []]
            request = Request(self, event.stream_id, headers)
            self.requests[event.stream_id] = request
            self.server.requests.append(request)
            self.server.arrivals.put_nowait(request)
        elif isinstance(event, h2.events.DataReceived):
            request = self.requests[event.stream_id]
            request.body += event.data
            size = event.flow_controlled_length
            if self.server.auto_window:
                self.h2.acknowledge_received_data(size, event.stream_id)
            elif size:
                self.h2.increment_flow_control_window(size)  # connection window only
        elif isinstance(event, h2.events.StreamEnded):
            request = self.requests[event.stream_id]
            request.complete.set()
            self.server.dispatch(request)
        elif isinstance(event, h2.events.StreamReset):
            if event.stream_id in self.requests:
                self.requests[event.stream_id].reset_code = int(event.error_code)
        elif isinstance(event, h2.events.PingReceived):
            self.pings.append(event.ping_data)
        elif isinstance(event, h2.events.PingAckReceived):
            self.ping_acks.append(event.ping_data)
        elif isinstance(event, h2.events.SettingsAcknowledged):
            self.settings_acks += 1
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.terminated = event

    # -- sending ---------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write whatever h2 has queued."""
        data = self.h2.data_to_send()
        if data and self.transport is not None:
            self.transport.write(data)

    def write(self, data: bytes) -> None:
        """Raw bytes, after what h2 queued."""
        self.flush()
        if self.transport is not None:
            self.transport.write(data)

    def send_frame(self, kind: int, flags: int, stream_id: int, payload: bytes = b"") -> None:
        """One raw frame (h2's state does not see it)."""
        self.write(frame(kind, flags, stream_id, payload))

    def goaway(self, last_stream_id: int, error_code: int = 0, debug: bytes = b"") -> None:
        """A raw GOAWAY (h2 would refuse to send anything after its own)."""
        payload = struct.pack(">II", last_stream_id, error_code) + debug
        self.send_frame(GOAWAY, 0, 0, payload)

    def ping(self, data: bytes) -> None:
        self.h2.ping(data)
        self.flush()

    def update_settings(self, settings: dict[int, int]) -> None:
        self.h2.update_settings(settings)  # type: ignore[arg-type]
        self.flush()

    def grant(self, stream_id: int, increment: int) -> None:
        """Open a stream's receive window by ``increment`` bytes."""
        self.h2.increment_flow_control_window(increment, stream_id)
        self.flush()

    def freeze(self) -> None:
        """Stop answering: frames are still read (into ``frozen_frames``) but never processed."""
        self._frozen = True

    def drop(self) -> None:
        """Abort the TCP connection (no GOAWAY)."""
        if self.transport is not None:
            self.transport.abort()


class ScriptedServer:
    """A loopback HTTP/2 server; ``handler`` answers each complete request in its own task.

    ``settings`` are announced in a SETTINGS frame after the connection preface; with
    ``auto_window`` off, stream receive windows are only opened by ``ServerConnection.grant``.
    Abort calls (the client's clean-up after a cancelled stream) are answered with an empty
    message unless ``answer_aborts`` is off. Protocol errors of the client and exceptions of
    handlers fail the test when the server is left.
    """

    def __init__(
        self,
        handler: Handler | None = None,
        *,
        settings: dict[int, int] | None = None,
        auto_window: bool = True,
        answer_aborts: bool = True,
    ) -> None:
        self.handler = handler
        self.settings = settings or {}
        self.auto_window = auto_window
        self.answer_aborts = answer_aborts
        self.connections: list[ServerConnection] = []
        self.requests: list[Request] = []
        self.aborts: list[Request] = []
        self.arrivals: asyncio.Queue[Request] = asyncio.Queue()
        self.errors: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: ServerConnection(self), "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for task in self._tasks:
            task.cancel()
        for conn in self.connections:
            conn.drop()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._tasks:
            await asyncio.wait(self._tasks)
        if exc_type is None and self.errors:
            raise AssertionError("; ".join(self.errors))

    async def next_request(self, within: float = 3.0) -> Request:
        """The next request whose headers arrived (in arrival order)."""
        return await asyncio.wait_for(self.arrivals.get(), within)

    def dispatch(self, request: Request) -> None:
        """Run the handler for a complete request."""
        if self.answer_aborts and request.method == "Abort":
            self.aborts.append(request)
            request.reply(b"")
            return
        if self.handler is not None:
            task = asyncio.get_running_loop().create_task(self._run(self.handler, request))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, handler: Handler, request: Request) -> None:
        try:
            await handler(request)
        except Exception as exc:
            self.errors.append(f"handler failed: {exc!r}")
