"""The native transport writes the frames of one event-loop turn together.

The control frames queued during one turn of the loop (resets, window updates) go out in a
single socket write by the next callback of the loop, never after a timer; a new call's request
is written at once (a call queued behind a busy turn delays the first token), together with
whatever was queued before it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from turnout.wire import pb
from turnout.wire.http2 import Http2Connection
from turnout.wire.native import NativeChannel
from turnout.wire.transport import method_path

from ._h2server import Request, ScriptedServer
from .test_http2_transport import (
    ANSWER,
    ANSWER_BYTES,
    CANCEL,
    HEALTHY,
    answered_by_the_test,
    answering,
    channel_for,
    gen_request,
    routes,
    wait_until,
)


class CountingTransport:
    """Forwards to a real transport and records each ``write``."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


async def connected(
    server: ScriptedServer, channel: NativeChannel, monkeypatch: pytest.MonkeyPatch
) -> tuple[Http2Connection, CountingTransport]:
    """The channel's connection (up, settings exchanged) with its writes counted from now on."""
    path = method_path("HealthCheck")
    health = channel.call("HealthCheck", path, pb.HealthCheckRequest(), pb.HealthCheckResponse, 5)
    assert await health.read() is not None
    connection = channel.ready_connection()
    assert connection is not None
    counting = CountingTransport(connection._transport)
    monkeypatch.setattr(connection, "_transport", counting)
    return connection, counting


def start_generate(channel: NativeChannel, request_id: str) -> Any:
    return channel.call(
        "Generate", method_path("Generate"), gen_request(request_id), pb.GenerateResponse, 5
    )


async def answer_each(request: Request) -> None:
    request.reply(*ANSWER_BYTES)


async def test_each_call_is_written_when_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    server_handler = routes(HealthCheck=answering(HEALTHY), Generate=answer_each)
    async with ScriptedServer(server_handler) as server, channel_for(server) as channel:
        _, counting = await connected(server, channel, monkeypatch)

        ids = [f"req-{k}" for k in range(8)]
        calls = []
        for request_id in ids:  # one turn
            calls.append(start_generate(channel, request_id))
            assert len(counting.writes) == len(calls)  # not left for the end of the turn
        for call in calls:
            assert [m async for m in _messages(call)] == ANSWER

        arrived = [r for r in server.requests if r.method == "Generate"]
        got = [pb.GenerateRequest.FromString(r.messages()[0]).request_id for r in arrived]
        assert sorted(got) == ids
        assert server.connections[0].error is None


async def test_resets_of_one_turn_are_written_by_the_next_loop_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_handler = routes(HealthCheck=answering(HEALTHY), Generate=answered_by_the_test)
    async with ScriptedServer(server_handler) as server, channel_for(server) as channel:
        _, counting = await connected(server, channel, monkeypatch)

        calls = [start_generate(channel, f"req-{k}") for k in range(3)]
        assert len(counting.writes) == 3
        for call in calls:
            call.cancel()
        assert len(counting.writes) == 3  # the resets are queued for the end of this turn …
        for _ in range(3):  # … and written within a few turns: no timer involved
            await asyncio.sleep(0)
            if len(counting.writes) > 3:
                break
        assert len(counting.writes) == 4  # three RST_STREAMs, one write
        assert server.connections[0].error is None


async def test_a_call_reset_in_the_turn_it_started_goes_out_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_handler = routes(HealthCheck=answering(HEALTHY), Generate=answered_by_the_test)
    async with ScriptedServer(server_handler) as server, channel_for(server) as channel:
        _, counting = await connected(server, channel, monkeypatch)

        call = start_generate(channel, "gone")
        call.cancel()  # RST_STREAM after the request's HEADERS and DATA
        request = await server.next_request()
        while request.method != "Generate":
            request = await server.next_request()
        await wait_until(lambda: request.reset_code == CANCEL)
        assert len(counting.writes) == 2
        assert server.connections[0].error is None  # h2 saw a valid frame order


async def _messages(call: Any) -> Any:
    async with asyncio.timeout(5):
        while (message := await call.read()) is not None:
            yield message
