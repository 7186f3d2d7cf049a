"""A stream's middle pieces written straight to the connection (:class:`DirectBody`): the same
bytes as uvicorn's ``send`` writes, each piece its own write; ``send`` (and its flow control)
whenever the client is not reading; nothing once it is gone; the connection reusable after.
Real uvicorn protocol under :class:`GuardedProtocol`, on a transport that records each write."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from turnout.config import ServerConfig
from turnout.server.connections import ConnectionLimits, GuardedProtocol
from turnout.server.direct_body import DIRECT_BODY_KEY, direct_body_of
from turnout.server.middleware import OpsMiddleware, OpsState
from turnout.server.respond import StreamAnswer

from ..transports import RecordingTransport

POST = b"POST /v1/chat/completions HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n\r\n"
GET = b"GET /again HTTP/1.1\r\nhost: test\r\n\r\n"


class Source:
    """The batches of a stream, handed over one by one (``put``; None ends it)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[list[Any] | None] = asyncio.Queue()
        self.closed = False

    async def batches(self) -> AsyncIterator[list[Any]]:
        try:
            while (batch := await self.queue.get()) is not None:
                yield batch
        finally:
            self.closed = True


class StreamApp:
    """Answers a POST with an event stream of ``source``, and anything else with ``ok``;
    ``direct``: False withholds the connection's direct body (every piece through ``send``).
    Keeps the messages its ``send`` saw."""

    def __init__(self, source: Source, *, direct: bool = True) -> None:
        self.source = source
        self.direct = direct
        self.sent: list[dict[str, Any]] = []
        self.offered: list[bool] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self.direct:
            scope["state"].pop(DIRECT_BODY_KEY, None)
        self.offered.append(direct_body_of(scope) is not None)

        async def recording_send(message: Any) -> None:
            self.sent.append(message)
            await send(message)

        if scope["method"] != "POST":
            await recording_send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"2")],
                }
            )
            await recording_send({"type": "http.response.body", "body": b"ok"})
            return
        stream = StreamAnswer(self.source.batches())  # type: ignore[arg-type]
        await stream(scope, receive, recording_send)


def connect(app: Any) -> tuple[GuardedProtocol, RecordingTransport]:
    config = uvicorn.Config(app, http="httptools", lifespan="off", log_level="warning")
    config.load()
    protocol = GuardedProtocol(
        config, ServerState(), {}, asyncio.get_running_loop(), limits=ConnectionLimits()
    )
    wire = RecordingTransport()
    protocol.connection_made(wire)
    return protocol, wire


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def streaming(
    *, direct: bool = True
) -> tuple[Source, StreamApp, GuardedProtocol, RecordingTransport]:
    """A connection whose POST has started an event stream of a new source."""
    source = Source()
    app = StreamApp(source, direct=direct)
    protocol, wire = connect(app)
    protocol.data_received(POST)
    await settle()
    return source, app, protocol, wire


async def stream_through(
    direct: bool, batches: list[list[Any]]
) -> tuple[StreamApp, RecordingTransport]:
    source, app, protocol, wire = await streaming(direct=direct)
    for batch in batches:
        source.queue.put_nowait(batch)
        await settle()
    source.queue.put_nowait(None)
    await settle()
    protocol.connection_lost(None)
    return app, wire


BATCHES: list[list[Any]] = [[{"a": 1}], [{"b": "é" * 300}], [{"c": 3}, {"d": 4}], [{"e": ""}]]


async def test_the_wire_carries_the_same_writes_as_through_send() -> None:
    direct_app, direct_wire = await stream_through(True, BATCHES)
    send_app, send_wire = await stream_through(False, BATCHES)
    assert direct_app.offered == [True]
    assert send_app.offered == [False]

    def without_date(writes: list[bytes]) -> list[bytes]:
        return [
            b"\r\n".join(line for line in w.split(b"\r\n") if not line.startswith(b"date: "))
            for w in writes
        ]

    # The head (alone: the first piece came a turn later), then each piece one write, framed
    # as uvicorn frames a chunk.
    assert without_date(direct_wire.writes) == without_date(send_wire.writes)
    assert len(direct_wire.writes) == len(BATCHES) + 2
    body = b"".join(direct_wire.writes).partition(b"\r\n\r\n")[2]
    assert body.startswith(b'f\r\ndata: {"a":1}\n\n\r\n')
    assert body.endswith(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
    # Through send: the head and every piece; direct: the head and the end only.
    assert len(send_app.sent) == len(BATCHES) + 2
    assert [m["type"] for m in direct_app.sent] == ["http.response.start", "http.response.body"]
    assert direct_app.sent[-1]["more_body"] is False


async def test_a_client_not_reading_pauses_the_stream_until_it_reads_again() -> None:
    source, app, protocol, wire = await streaming()
    source.queue.put_nowait([{"n": 1}])
    await settle()
    assert len(wire.writes) == 2  # the head, the first piece

    protocol.pause_writing()  # the socket's buffer is full: the client stopped reading
    source.queue.put_nowait([{"n": 2}])
    source.queue.put_nowait([{"n": 3}])
    await settle()
    # The second piece waits in send for the client; the third is not even taken.
    assert len(wire.writes) == 2
    assert source.queue.qsize() == 1
    assert len(app.sent) == 2  # the head, and the piece waiting in send

    protocol.resume_writing()
    source.queue.put_nowait(None)
    await settle()
    body = b"".join(wire.writes).partition(b"\r\n\r\n")[2]
    assert body == (
        b'f\r\ndata: {"n":1}\n\n\r\nf\r\ndata: {"n":2}\n\n\r\nf\r\ndata: {"n":3}\n\n\r\n'
        b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
    )
    assert len(app.sent) == 3  # the third piece went direct again; then the end
    protocol.connection_lost(None)


async def test_nothing_is_written_once_the_client_is_gone() -> None:
    source, _app, protocol, wire = await streaming()
    source.queue.put_nowait([{"n": 1}])
    await settle()
    written = len(wire.writes)
    protocol.connection_lost(None)
    source.queue.put_nowait([{"n": 2}])
    source.queue.put_nowait(None)
    await settle()
    assert len(wire.writes) == written
    assert source.closed


async def test_the_connection_serves_its_next_request_after_a_stream() -> None:
    source, app, protocol, wire = await streaming()
    source.queue.put_nowait([{"n": 1}])
    source.queue.put_nowait(None)
    await settle()
    assert b"".join(wire.writes).endswith(b"0\r\n\r\n")
    before = len(wire.writes)
    protocol.data_received(GET)
    await settle()
    assert app.offered == [True, True]
    answer = b"".join(wire.writes[before:])
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b"\r\n\r\nok")
    assert not wire.closed
    protocol.connection_lost(None)


async def test_only_a_started_chunked_response_is_written_directly() -> None:
    results: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        direct = direct_body_of(scope)
        assert direct is not None
        results.append(direct.write(b"x"))  # no head yet
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
        )
        results.append(direct.write(b"x"))  # not chunked
        await send({"type": "http.response.body", "body": b"ok"})
        results.append(direct.write(b"x"))  # complete

    protocol, wire = connect(app)
    protocol.data_received(GET)
    await settle()
    assert results == [False, False, False]
    assert b"".join(wire.writes).endswith(b"\r\n\r\nok")
    protocol.connection_lost(None)


async def test_a_head_request_gets_no_direct_body() -> None:
    seen: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        direct = direct_body_of(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(direct is not None and direct.write(b"x"))
        await send({"type": "http.response.body", "body": b""})

    protocol, wire = connect(app)
    protocol.data_received(GET.replace(b"GET", b"HEAD"))
    await settle()
    assert seen == [False]
    assert b"".join(wire.writes).endswith(b"\r\n\r\n")
    assert b"x" not in b"".join(wire.writes).partition(b"\r\n\r\n")[2]
    protocol.connection_lost(None)


@pytest.mark.parametrize("direct_body", [True, False])
async def test_the_ops_middleware_withholds_the_direct_body_unless_told(
    direct_body: bool,
) -> None:
    offered: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        offered.append(direct_body_of(scope) is not None)
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
        )
        await send({"type": "http.response.body", "body": b"ok"})

    ops = OpsMiddleware(app, OpsState(ServerConfig()), direct_body=direct_body)  # type: ignore[arg-type]
    protocol, _wire = connect(ops)
    protocol.data_received(GET)
    await settle()
    assert offered == [direct_body]
    protocol.connection_lost(None)


async def test_a_finished_request_is_freed_at_once_not_left_to_the_garbage_collector() -> None:
    source, _app, protocol, _wire = await streaming()
    source.queue.put_nowait([{"n": 1}])
    source.queue.put_nowait(None)
    await settle()
    first = weakref.ref(protocol._inner.cycle)  # type: ignore[attr-defined]
    gc.disable()
    try:
        protocol.data_received(GET)  # the next request takes the connection's cycle slot
        await settle()
        assert first() is None
    finally:
        gc.enable()
        protocol.connection_lost(None)
