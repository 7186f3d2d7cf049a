"""A gRPC server on :mod:`turnout.sim.h2server`: serves ``grpc`` method handlers over HTTP/2.

``NativeServer`` takes the same handlers as ``grpc.aio.server`` (``add_generic_rpc_handlers``,
``add_registered_method_handlers``, so generated ``add_…Servicer_to_server`` functions work),
unary-unary and unary-stream methods with async handlers. Each call runs in a task with a
``NativeContext``: the part of ``grpc.aio.ServicerContext`` the simulator uses (``abort``,
``invocation_metadata``, ``time_remaining``, ``set_code`` / ``set_details``,
``set_trailing_metadata``, ``peer``, ``cancelled``, ``done``). The peer resetting the stream
cancels the task, as does the call's ``grpc-timeout`` (then DEADLINE_EXCEEDED).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import socket
from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import Any, Final, NoReturn
from urllib.parse import quote

import grpc
import grpc.aio

from turnout.sim.h2server import H2ServerConnection, ServerSettings, ServerStream
from turnout.wire.h2frames import ErrorCode
from turnout.wire.header_codec import encode_fields

__all__ = ["NativeContext", "NativeServer"]

#: ``:status 200`` (static table entry 8) and the gRPC content type.
_RESPONSE_HEADERS: Final = b"\x88" + encode_fields([("content-type", "application/grpc")])
_NOT_GRPC: Final = encode_fields([(":status", "415")])
_OK_TRAILERS: Final = encode_fields([("grpc-status", "0")])
#: Headers a gRPC server does not show the handler as invocation metadata.
_HIDDEN: Final = frozenset(
    {"te", "content-type", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"}
)
_UNITS: Final = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
#: grpc-message: printable ASCII except ``%`` stays as is (gRPC's percent-encoding).
_MESSAGE_SAFE: Final = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")
_STOP_WAIT_S: Final = 5.0
_log = logging.getLogger(__name__)
#: What ``NativeContext._request`` returns after refusing the request.
_REFUSED: Final = object()


class _Details:
    """What ``grpc.GenericRpcHandler.service`` is asked about a call."""

    __slots__ = ("invocation_metadata", "method")

    def __init__(self, method: str, metadata: tuple[tuple[str, str | bytes], ...]) -> None:
        self.method = method
        self.invocation_metadata = metadata


class NativeServer:
    """gRPC over this project's HTTP/2 server connection, on asyncio (no TLS)."""

    def __init__(self, settings: ServerSettings | None = None) -> None:
        self.settings = settings or ServerSettings()
        self._generic: list[grpc.GenericRpcHandler[Any, Any]] = []
        self._methods: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[H2ServerConnection] = set()
        self._calls: set[asyncio.Task[None]] = set()

    def add_generic_rpc_handlers(
        self, handlers: Iterable[grpc.GenericRpcHandler[Any, Any]]
    ) -> None:
        """Serve the methods these handlers know (asked once per method path)."""
        self._generic.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        """Serve ``/service/method`` with ``handlers[method]``."""
        for name, handler in handlers.items():
            self._methods[f"/{service}/{name}"] = handler

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); returns the port. ``OSError`` if taken."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._new_connection,
            host,
            port,
            reuse_address=True,
            backlog=1024,
        )
        sockets = self._server.sockets
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return int(sockets[0].getsockname()[1])

    async def stop(self, grace: float | None = None) -> None:
        """Stop listening, send GOAWAY, give calls ``grace`` seconds, then cancel them and
        drop the connections."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        connections = list(self._connections)
        for connection in connections:
            connection.goaway()
        if grace and self._calls:
            await asyncio.wait(list(self._calls), timeout=grace)
        for task in list(self._calls):
            task.cancel()
        for connection in connections:
            connection.abort()
        if self._calls:
            await asyncio.wait(list(self._calls), timeout=_STOP_WAIT_S)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(server.wait_closed(), _STOP_WAIT_S)

    # -- dispatch ------------------------------------------------------------------------------

    def _new_connection(self) -> H2ServerConnection:
        connection = H2ServerConnection(self._on_request, self.settings, self._connections.discard)
        self._connections.add(connection)
        return connection

    def _on_request(self, connection: H2ServerConnection, stream: ServerStream) -> None:
        fields = dict(stream.headers)
        if fields.get(":method") != "POST" or not fields.get("content-type", "").startswith(
            "application/grpc"
        ):
            connection.send_headers(stream, _NOT_GRPC, end_stream=True)
            return
        path = fields.get(":path", "")
        metadata = _metadata(stream.headers)
        handler = self._methods.get(path)
        if handler is None:
            handler = self._find(path, metadata)
        if handler is None:
            _send_status(connection, stream, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return
        if handler.request_streaming or (
            handler.unary_unary is None and handler.unary_stream is None
        ):
            _send_status(
                connection, stream, grpc.StatusCode.UNIMPLEMENTED, "client streaming unsupported"
            )
            return
        call = NativeContext(connection, stream, handler, metadata, path)
        stream.call = call
        timeout = fields.get("grpc-timeout")
        if timeout:
            call.set_deadline(timeout)
        task = asyncio.get_running_loop().create_task(call.run())
        call.task = task
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    def _find(
        self, path: str, metadata: tuple[tuple[str, str | bytes], ...]
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        details = _Details(path, metadata)
        for generic in self._generic:
            handler = generic.service(details)  # type: ignore[arg-type]
            if handler is not None:
                return handler
        return None


class NativeContext:
    """One call: runs its handler and is the ``grpc.aio.ServicerContext`` it is given."""

    __slots__ = (
        "_code",
        "_connection",
        "_deadline",
        "_deadline_timer",
        "_details",
        "_done",
        "_ended_by",
        "_handler",
        "_metadata",
        "_path",
        "_stream",
        "_trailing",
        "task",
    )

    def __init__(
        self,
        connection: H2ServerConnection,
        stream: ServerStream,
        handler: grpc.RpcMethodHandler[Any, Any],
        metadata: tuple[tuple[str, str | bytes], ...],
        path: str,
    ) -> None:
        self._connection = connection
        self._path = path
        self._stream = stream
        self._handler = handler
        self._metadata = metadata
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()
        self._deadline: float | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        #: Why the task was cancelled by us: "reset" (the peer) or "deadline".
        self._ended_by = ""
        self._done = False
        self.task: asyncio.Task[None] | None = None

    # -- grpc.aio.ServicerContext (what the simulator uses, and a little more) -----------------

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: Any = ()
    ) -> NoReturn:
        """End the call with ``code`` (raises, as grpc.aio's does)."""
        if code == grpc.StatusCode.OK:
            raise ValueError("abort with OK status is not allowed")
        self._code = code
        self._details = details
        if trailing_metadata:
            self._trailing = tuple(trailing_metadata)
        raise grpc.aio.AbortError()

    async def send_initial_metadata(self, initial_metadata: Sequence[Any] = ()) -> None:
        """Send the response headers now, before any message (custom metadata is not sent): a
        subscription that may stay quiet answers its client at once."""
        stream = self._stream
        if not stream.headers_sent and not stream.closed:
            stream.headers_sent = True
            self._connection.send_headers(stream, _RESPONSE_HEADERS)

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The request's custom headers (``-bin`` values decoded to bytes)."""
        return self._metadata

    def set_code(self, code: grpc.StatusCode) -> None:
        """The status to end with (unless the handler aborts)."""
        self._code = code

    def set_details(self, details: str) -> None:
        """The status message to end with."""
        self._details = details

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str | bytes]]) -> None:
        """Extra trailers."""
        self._trailing = tuple(trailing_metadata)

    def time_remaining(self) -> float | None:
        """Seconds left before the call's deadline (None: no deadline)."""
        if self._deadline is None:
            return None
        return max(self._deadline - asyncio.get_running_loop().time(), 0.0)

    def peer(self) -> str:
        """``ipv4:host:port`` of the client."""
        return self._connection.peer

    def cancelled(self) -> bool:
        """True if the peer cancelled the call or its deadline passed."""
        return bool(self._ended_by)

    def done(self) -> bool:
        """True once the call ended."""
        return self._done

    # -- the call ------------------------------------------------------------------------------

    def set_deadline(self, header: str) -> None:
        """Start the ``grpc-timeout`` clock (a malformed value is ignored)."""
        try:
            seconds = int(header[:-1]) * _UNITS[header[-1]]
        except (KeyError, ValueError, IndexError):
            return
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + seconds
        self._deadline_timer = loop.call_later(seconds, self._cancel, "deadline")

    def on_reset(self, error_code: int) -> None:
        """The peer reset the stream or the connection is gone."""
        self._cancel("reset")

    def _cancel(self, why: str) -> None:
        if self._done or self._ended_by:
            return
        self._ended_by = why
        if self.task is not None:
            self.task.cancel()

    async def run(self) -> None:
        """Decode the request, run the handler, send its messages and status."""
        stream, handler = self._stream, self._handler
        context: Any = self  # stands in for grpc.aio.ServicerContext
        try:
            request = self._request()
            if request is not _REFUSED:
                if handler.unary_stream is not None:
                    await self._stream_responses(handler.unary_stream(request, context))
                else:
                    assert handler.unary_unary is not None
                    response = await handler.unary_unary(request, context)
                    if self._code is None or self._code == grpc.StatusCode.OK:
                        serialize = handler.response_serializer
                        self._send(serialize(response) if serialize is not None else response)
                if not stream.closed:
                    self._end()
        except grpc.aio.AbortError:
            self._end()
        except asyncio.CancelledError:
            if self._ended_by == "deadline":
                self._code, self._details = grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
                self._end()
            elif not self._ended_by:
                self._connection.reset(stream, ErrorCode.CANCEL)  # the server is stopping
        except Exception as exc:
            _log.exception("gRPC handler of %s failed", self._path)
            if self._code is None or self._code == grpc.StatusCode.OK:
                self._code = grpc.StatusCode.UNKNOWN
                self._details = f"Unexpected {type(exc)}: {exc}"
            self._end()
        finally:
            self._done = True
            if self._deadline_timer is not None:
                self._deadline_timer.cancel()

    def _request(self) -> Any:
        """The request message, or ``_REFUSED`` after answering an unusable one."""
        stream = self._stream
        body = stream.body
        if stream.overflow:
            self._code = grpc.StatusCode.RESOURCE_EXHAUSTED
            self._details = "request message larger than the server accepts"
            self._end()
            return _REFUSED
        if len(body) < 5 or body[0] not in (0, 1):
            self._code, self._details = grpc.StatusCode.INTERNAL, "no request message"
            self._end()
            return _REFUSED
        if body[0]:
            self._code = grpc.StatusCode.UNIMPLEMENTED
            self._details = "compressed messages are not supported"
            self._end()
            return _REFUSED
        size = int.from_bytes(body[1:5], "big")
        if len(body) != size + 5:
            self._code, self._details = grpc.StatusCode.INTERNAL, "one request message expected"
            self._end()
            return _REFUSED
        data = bytes(body[5:])
        stream.body = bytearray()
        deserialize = self._handler.request_deserializer
        return deserialize(data) if deserialize is not None else data

    async def _stream_responses(self, responses: Any) -> None:
        if not isinstance(responses, AsyncGenerator):
            await responses  # a handler that writes nothing itself
            return
        gen = responses
        stream, connection = self._stream, self._connection
        serialize = self._handler.response_serializer
        try:
            async for response in gen:
                data = serialize(response) if serialize is not None else response
                if not self._send(data) and not await connection.wait_writable(stream):
                    break  # the stream is gone
        finally:
            await gen.aclose()

    def _send(self, data: bytes) -> bool:
        stream = self._stream
        if not stream.headers_sent:
            stream.headers_sent = True
            self._connection.send_headers(stream, _RESPONSE_HEADERS)
        return self._connection.send_message(stream, data)

    def _end(self) -> None:
        """Send the status: trailers, or headers and trailers in one block (trailers-only)."""
        stream = self._stream
        if stream.closed:
            return
        code = self._code or grpc.StatusCode.OK
        if code == grpc.StatusCode.OK and not self._trailing:
            block = _OK_TRAILERS
        else:
            fields = [("grpc-status", str(code.value[0]))]
            if self._details:
                fields.append(("grpc-message", quote(self._details, safe=_MESSAGE_SAFE)))
            fields += _encode_metadata(self._trailing)
            block = encode_fields(fields)
        if stream.headers_sent:
            self._connection.send_trailers(stream, block)
        else:
            stream.headers_sent = True
            self._connection.send_headers(stream, _RESPONSE_HEADERS + block, end_stream=True)


def _send_status(
    connection: H2ServerConnection, stream: ServerStream, code: grpc.StatusCode, details: str
) -> None:
    """A trailers-only answer."""
    block = encode_fields(
        [("grpc-status", str(code.value[0])), ("grpc-message", quote(details, safe=_MESSAGE_SAFE))]
    )
    connection.send_headers(stream, _RESPONSE_HEADERS + block, end_stream=True)


def _metadata(headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str | bytes], ...]:
    out: list[tuple[str, str | bytes]] = []
    for name, value in headers:
        if name.startswith(":") or name in _HIDDEN:
            continue
        if name.endswith("-bin"):
            try:
                out.append((name, base64.b64decode(value + "=" * (-len(value) % 4))))
            except ValueError:
                continue
        else:
            out.append((name, value))
    return tuple(out)


def _encode_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> list[tuple[str, str]]:
    out = []
    for name, value in metadata:
        if isinstance(value, bytes):
            out.append((name, base64.b64encode(value).decode().rstrip("=")))
        else:
            out.append((name, value))
    return out
