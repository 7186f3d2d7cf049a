"""What a worker transport offers ``WorkerClient``: settings, calls and channels.

Two transports implement it: ``native`` (turnout's own HTTP/2 client, the default; see
``turnout.wire.native``) and ``grpcio`` (``grpc.aio``; see ``turnout.wire.grpcio_transport``).
Both raise ``WorkerCallError`` for every failure, with the worker's gRPC status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol

__all__ = [
    "Call",
    "Channel",
    "ClientSettings",
    "Message",
    "MessageType",
    "Metadata",
    "TransportName",
    "method_path",
]

_MIB: Final = 1024 * 1024
SERVICE: Final = "sglang.grpc.scheduler.SglangScheduler"

TransportName = Literal["native", "grpcio"]
#: gRPC metadata of a call: (lower-case key, printable ASCII value) pairs.
Metadata = Sequence[tuple[str, str]]


class Message(Protocol):
    """A protobuf message as the transports use it."""

    def SerializeToString(self) -> bytes: ...


class MessageType(Protocol):
    """A protobuf message class."""

    def FromString(self, data: bytes) -> Any: ...


def method_path(method: str, service: str = SERVICE) -> str:
    """The HTTP/2 path of a method of ``service`` (default SGLang's ``SglangScheduler``)."""
    return f"/{service}/{method}"


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Timeouts (seconds), limits and transport of a ``WorkerClient``."""

    #: Deadline of GetModelInfo / GetServerInfo / GetLoads / Embed.
    unary_timeout: float = 10.0
    #: Deadline of HealthCheck (SGLang answers it by running a one-token generation).
    health_timeout: float = 25.0
    #: Deadline of the background Abort sent when a stream is dropped.
    abort_timeout: float = 2.0
    #: A PING after this much silence from a worker while calls wait on it …
    keepalive_time_s: float = 30.0
    #: … and the connection counts as dead if the PING is not answered within this.
    keepalive_timeout_s: float = 10.0
    max_message_bytes: int = 256 * _MIB
    #: Per call: how much of a worker's answer may wait in the router for a reader that does
    #: not keep up (a client that stopped reading) before the worker is paused by HTTP/2 flow
    #: control. Messages larger than this are still received whole.
    stream_window_bytes: int = _MIB
    #: Upper bound of the reconnect back-off, so a restarted worker is found again quickly.
    max_reconnect_backoff_s: float = 5.0
    #: Bound of one TCP (and TLS) connection attempt.
    connect_timeout_s: float = 5.0
    #: ``native`` (turnout's HTTP/2 client, cheapest per message) or ``grpcio`` (``grpc.aio``).
    transport: TransportName = "native"
    #: While the event loop is busy (``turnout.wire.loop_load``), a stream's reader is woken for
    #: new messages at most this often (s); what arrives meanwhile is taken as one batch. The
    #: first message and the end of a call are never held back; 0 turns pacing off. Native
    #: transport only.
    busy_read_interval_s: float = 0.025

    def channel_options(self) -> list[tuple[str, Any]]:
        """grpc channel arguments derived from the settings (``grpcio`` transport)."""
        return [
            ("grpc.keepalive_time_ms", int(self.keepalive_time_s * 1000)),
            ("grpc.keepalive_timeout_ms", int(self.keepalive_timeout_s * 1000)),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", int(self.max_reconnect_backoff_s * 1000)),
            # Our own subchannel: two clients of one address never share (or close) a connection.
            ("grpc.use_local_subchannel_pool", 1),
        ]


class Call(Protocol):
    """One call with a single request and streamed responses."""

    async def read(self) -> Any:
        """The next response; None when the call ended with OK or was cancelled."""
        ...

    async def read_batch(self) -> list[Any]:
        """Every response that arrived and was not read yet (waiting for one if there is
        none); an empty list when the call ended with OK or was cancelled."""
        ...

    def cancel(self) -> None:
        """Stop the call now (the worker sees it cancelled)."""

    def release(self) -> None:
        """The caller needs nothing more: let the worker end the call, cancelling it only if
        it does not end soon."""

    def done(self) -> bool:
        """True once the call ended."""
        ...


class Channel(Protocol):
    """Connections to one worker."""

    def call(
        self,
        method: str,
        path: str,
        request: Message,
        response_type: MessageType,
        timeout: float | None,
        *,
        metadata: Metadata = (),
    ) -> Call:
        """Start a call: the request is sent without waiting for ``read()``; ``metadata`` goes
        with it (the W3C trace context, for one)."""
        ...

    async def wait_ready(self, within: float) -> None:
        """Return once connected; ``WorkerCallError`` (UNAVAILABLE) after ``within`` s."""

    async def close(self) -> None:
        """Close the connections."""
