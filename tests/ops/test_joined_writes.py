"""The connection guard sends a response's head and body in one write: real uvicorn protocol
under :class:`GuardedProtocol`, on a transport that records each write."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from turnout.server.connections import ConnectionLimits, GuardedProtocol
from turnout.server.direct_body import JoinedWrites

from ..transports import RecordingTransport

REQUEST = b"GET / HTTP/1.1\r\nhost: test\r\n\r\n"


async def answer(scope: Any, receive: Any, send: Any) -> None:
    """A non-streaming answer: head and body in the same turn."""
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


async def stream(scope: Any, receive: Any, send: Any) -> None:
    """A stream whose first piece comes later."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await asyncio.sleep(0.05)
    await send({"type": "http.response.body", "body": b"one", "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def connect(app: Any, request: bytes = REQUEST) -> tuple[GuardedProtocol, RecordingTransport]:
    """A connection to ``app`` that received ``request``."""
    config = uvicorn.Config(app, http="httptools", lifespan="off", log_level="warning")
    config.load()
    protocol = GuardedProtocol(
        config, ServerState(), {}, asyncio.get_running_loop(), limits=ConnectionLimits()
    )
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.data_received(request)
    return protocol, transport


async def serve(app: Any, request: bytes = REQUEST) -> RecordingTransport:
    protocol, transport = connect(app, request)
    await asyncio.sleep(0.2)
    protocol.connection_lost(None)
    return transport


async def test_a_non_streaming_answer_is_one_write() -> None:
    transport = await serve(answer)
    assert len(transport.writes) == 1
    head, _, body = transport.writes[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert body == b"ok"


async def test_a_stream_head_is_not_held_until_its_first_piece() -> None:
    protocol, transport = connect(stream)
    await asyncio.sleep(0.02)  # the app is asleep before its first piece
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\n")
    await asyncio.sleep(0.2)
    assert b"".join(transport.writes[1:]) == b"3\r\none\r\n0\r\n\r\n"
    protocol.connection_lost(None)


async def test_a_head_request_gets_its_head_alone() -> None:
    transport = await serve(answer, REQUEST.replace(b"GET", b"HEAD"))
    assert len(transport.writes) == 1
    assert transport.writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.writes[0].endswith(b"\r\n\r\n")


async def test_held_bytes_go_first_and_an_abort_drops_them() -> None:
    loop = asyncio.get_running_loop()
    transport = RecordingTransport()
    writes = JoinedWrites(transport, loop)
    writes.write(b"HTTP/1.1 200 OK\r\n\r\n")
    writes.close()
    assert transport.writes == [b"HTTP/1.1 200 OK\r\n\r\n"]
    assert transport.closed

    transport = RecordingTransport()
    writes = JoinedWrites(transport, loop)
    writes.write(b"HTTP/1.1 200 OK\r\n\r\n")
    writes.abort()
    await asyncio.sleep(0)  # the flush scheduled by the write finds nothing to send
    assert transport.writes == []
    assert transport.aborted
