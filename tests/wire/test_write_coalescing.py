"""The native transport writes the frames of one event-loop turn together.

Every call started (or reset) during one turn of the loop goes out in a single socket write, so
at high concurrency many calls share one syscall; a lone call is still written by the next
callback of the loop, never after a timer.
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


async def test_calls_started_in_one_turn_share_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    server_handler = routes(HealthCheck=answering(HEALTHY), Generate=answer_each)
    async with ScriptedServer(server_handler) as server, channel_for(server) as channel:
        _, counting = await connected(server, channel, monkeypatch)

        ids = [f"req-{k}" for k in range(8)]
        calls = [start_generate(channel, request_id) for request_id in ids]  # one turn
        for call in calls:
            assert [m async for m in _messages(call)] == ANSWER

        assert len(counting.writes) == 1
        arrived = [r for r in server.requests if r.method == "Generate"]
        got = [pb.GenerateRequest.FromString(r.messages()[0]).request_id for r in arrived]
        assert sorted(got) == ids
        assert server.connections[0].error is None


async def test_a_lone_call_is_written_by_the_next_loop_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_handler = routes(HealthCheck=answering(HEALTHY), Generate=answer_each)
    async with ScriptedServer(server_handler) as server, channel_for(server) as channel:
        _, counting = await connected(server, channel, monkeypatch)

        call = start_generate(channel, "alone")
        assert counting.writes == []  # queued for the end of this turn …
        for _ in range(3):  # … and written within a few turns: no timer involved
            await asyncio.sleep(0)
            if counting.writes:
                break
        assert len(counting.writes) == 1
        assert [m async for m in _messages(call)] == ANSWER


async def test_a_call_reset_in_the_turn_it_started_goes_out_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server_handler = routes(HealthCheck=answering(HEALTHY), Generate=answered_by_the_test)
    async with ScriptedServer(server_handler) as server, channel_for(server) as channel:
        _, counting = await connected(server, channel, monkeypatch)

        call = start_generate(channel, "gone")
        call.cancel()  # RST_STREAM queued behind the request's HEADERS and DATA
        request = await server.next_request()
        while request.method != "Generate":
            request = await server.next_request()
        await wait_until(lambda: request.reset_code == CANCEL)
        assert len(counting.writes) == 1
        assert server.connections[0].error is None  # h2 saw a valid frame order


async def _messages(call: Any) -> Any:
    async with asyncio.timeout(5):
        while (message := await call.read()) is not None:
            yield message
