"""The native transport against a scripted HTTP/2 server: what a grpcio worker never shows us.

Framing edge cases (split, packed, padded, CONTINUATION), malformed answers, resets, GOAWAY,
lost connections, keep-alive, flow control, stream limits, deadlines, cancellation, HPACK state.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from turnout.wire import (
    ClientSettings,
    GenerateStream,
    MalformedResponse,
    StreamRefused,
    WorkerCallError,
    WorkerClient,
    pb,
)
from turnout.wire import native as native_module
from turnout.wire.native import NativeCall, NativeChannel
from turnout.wire.transport import method_path

from ._h2server import (
    CONTINUATION,
    DATA,
    HEADERS,
    PING,
    PUSH_PROMISE,
    SETTINGS,
    WINDOW_UPDATE,
    Handler,
    Request,
    ScriptedServer,
    grpc_message,
    wait_until,
)

# h2 error codes and settings (RFC 9113 §7, §6.5.2)
NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9
ENHANCE_YOUR_CALM = 0xB
HEADER_TABLE_SIZE = 0x1
MAX_CONCURRENT_STREAMS = 0x3
INITIAL_WINDOW_SIZE = 0x4
MAX_FRAME_SIZE = 0x5

ANSWER = [
    pb.GenerateResponse(request_id="req-1", chunk=pb.GenerateStreamChunk(token_ids=[11, 12, 13])),
    pb.GenerateResponse(request_id="req-1", chunk=pb.GenerateStreamChunk(token_ids=[14])),
    pb.GenerateResponse(
        request_id="req-1",
        complete=pb.GenerateComplete(output_ids=[11, 12, 13, 14], finish_reason="stop"),
    ),
]
ANSWER_BYTES = [m.SerializeToString() for m in ANSWER]
ANSWER_BODY = b"".join(grpc_message(m) for m in ANSWER_BYTES)
HEALTHY = pb.HealthCheckResponse(healthy=True, message="ok").SerializeToString()


def gen_request(request_id: str = "req-1", prompt_tokens: int = 8) -> pb.GenerateRequest:
    """A Generate request with ``prompt_tokens`` input ids."""
    return pb.GenerateRequest(
        request_id=request_id,
        tokenized=pb.TokenizedInput(input_ids=list(range(1, prompt_tokens + 1))),
        stream=True,
    )


def routes(**handlers: Handler) -> Handler:
    """A handler dispatching on the gRPC method name."""

    async def handler(request: Request) -> None:
        await handlers[request.method](request)

    return handler


def answering(*messages: bytes) -> Handler:
    """A handler answering headers, ``messages``, OK trailers."""

    async def handler(request: Request) -> None:
        request.reply(*messages)

    return handler


async def answered_by_the_test(request: Request) -> None:
    """A handler leaving the answer to the test body (it takes the request from the server)."""


def client_for(server: ScriptedServer, **settings: Any) -> WorkerClient:
    return WorkerClient(server.url, ClientSettings(**settings))


@contextlib.asynccontextmanager
async def channel_for(server: ScriptedServer, **settings: Any) -> AsyncIterator[NativeChannel]:
    """A bare native channel to the scripted server, closed on exit."""
    channel = NativeChannel(
        server.target, tls=False, settings=ClientSettings(**settings), worker=server.url
    )
    try:
        yield channel
    finally:
        await channel.close()


def start_call(
    channel: NativeChannel, method: str = "Generate", timeout: float | None = None
) -> NativeCall:
    request = gen_request() if method == "Generate" else pb.HealthCheckRequest()
    response_type = pb.GenerateResponse if method == "Generate" else pb.HealthCheckResponse
    return channel.call(method, method_path(method), request, response_type, timeout)


async def answered_once(
    server: ScriptedServer, channel: NativeChannel, index: int
) -> tuple[NativeCall, Request]:
    """A Generate call whose request got headers and ``ANSWER[index]``, read by the client."""
    call = start_call(channel)
    request = await server.next_request()
    request.send_headers()
    request.send_data(grpc_message(ANSWER_BYTES[index]))
    assert await call.read() == ANSWER[index]
    return call, request


async def read_all(stream: GenerateStream) -> list[pb.GenerateResponse]:
    """Every response of a stream that must end with OK (bounded: no hang)."""
    async with asyncio.timeout(5):
        return [response async for response in stream]


async def read_until_error(
    stream: GenerateStream,
) -> tuple[list[pb.GenerateResponse], WorkerCallError]:
    """The responses delivered before the stream failed, and its error (bounded: no hang)."""
    got: list[pb.GenerateResponse] = []

    async def collect() -> None:
        async with asyncio.timeout(5):
            async for response in stream:
                got.append(response)

    with pytest.raises(WorkerCallError) as info:
        await collect()
    return got, info.value


# -- framing ---------------------------------------------------------------------------------


async def test_next_batch_hands_over_everything_that_arrived_together() -> None:
    async with ScriptedServer() as server, client_for(server) as client:
        stream = client.generate(gen_request())
        request = await server.next_request()
        request.send_headers()
        request.send_data(grpc_message(ANSWER_BYTES[0]) + grpc_message(ANSWER_BYTES[1]))
        await wait_until(lambda: len(stream._call._messages) == 2)  # type: ignore[attr-defined]
        assert await stream.next_batch() == ANSWER[:2]
        request.send_data(grpc_message(ANSWER_BYTES[2]))
        assert await stream.next_batch() == ANSWER[2:]
        assert stream.finished  # the one choice completed
        request.send_trailers()
        assert await stream.next_batch() == []
        assert stream.responses == 3


async def test_next_batch_delivers_messages_before_the_error_that_followed_them() -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        request.send_data(grpc_message(ANSWER_BYTES[0]) + grpc_message(ANSWER_BYTES[1]))
        request.send_trailers(14, "worker%20draining")

    async with ScriptedServer(handler) as server, client_for(server) as client:
        stream = client.generate(gen_request())
        await wait_until(stream._call.done)  # type: ignore[attr-defined]
        assert await stream.next_batch() == ANSWER[:2]
        with pytest.raises(WorkerCallError) as info:
            await stream.next_batch()
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert await stream.next_batch() == []  # closed after the error


@pytest.mark.parametrize("piece", [1, 3, 7])
async def test_messages_split_across_many_data_frames(piece: int) -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        for start in range(0, len(ANSWER_BODY), piece):
            request.send_data(ANSWER_BODY[start : start + piece])
        request.send_trailers()

    async with ScriptedServer(handler) as server, client_for(server) as client:
        assert await read_all(client.generate(gen_request())) == ANSWER


async def test_several_messages_in_one_data_frame() -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        # All three messages in one frame, then one frame ending the first half of a fourth …
        cut = len(ANSWER_BODY) + 3
        body = ANSWER_BODY + grpc_message(ANSWER_BYTES[0])
        request.send_data(body[:cut])
        request.send_data(body[cut:])  # … and its rest
        request.send_trailers()

    async with ScriptedServer(handler) as server, client_for(server) as client:
        assert await read_all(client.generate(gen_request())) == [*ANSWER, ANSWER[0]]


async def test_bytes_trickled_one_at_a_time() -> None:
    """Frames cut at every byte by the socket still parse (the client buffers partial frames)."""

    async def handler(request: Request) -> None:
        conn = request.conn
        conn.flush()
        conn.h2.send_headers(
            request.stream_id, [(":status", "200"), ("content-type", "application/grpc")]
        )
        conn.h2.send_data(request.stream_id, ANSWER_BODY)
        conn.h2.send_headers(request.stream_id, [("grpc-status", "0")], end_stream=True)
        data = conn.h2.data_to_send()
        for index in range(len(data)):
            conn.write(data[index : index + 1])
            await asyncio.sleep(0.001)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        assert await read_all(client.generate(gen_request())) == ANSWER


async def test_padded_data_and_padded_headers() -> None:
    async def handler(request: Request) -> None:
        request.send_headers(pad=17, priority=True)
        request.send_data(grpc_message(ANSWER_BYTES[0]), pad=9)
        request.send_data(grpc_message(ANSWER_BYTES[1]), pad=0)  # PADDED with zero padding
        request.send_data(grpc_message(ANSWER_BYTES[2]), pad=255)
        request.send_headers([("grpc-status", "0")], end_stream=True, pad=4)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        assert await read_all(client.generate(gen_request())) == ANSWER


@pytest.mark.parametrize("pad", [0, 6])
async def test_headers_and_trailers_split_over_continuation(pad: int) -> None:
    long_value = "x" * 300

    async def handler(request: Request) -> None:
        request.send_headers(
            [(":status", "200"), ("content-type", "application/grpc"), ("x-long", long_value)],
            split=4,
            pad=pad,
        )
        request.send_data(ANSWER_BODY)
        request.send_headers(
            [("grpc-status", "0"), ("x-long-trailer", long_value)], end_stream=True, split=3
        )

    async with ScriptedServer(handler) as server, client_for(server) as client:
        assert await read_all(client.generate(gen_request())) == ANSWER
        # The HPACK state survived the split blocks: the next call on the connection works too.
        assert await read_all(client.generate(gen_request())) == ANSWER
        assert len(server.connections) == 1


async def test_interleaved_streams() -> None:
    """Frames of two streams interleaved in one write reach the right calls."""
    other = [
        pb.GenerateResponse(request_id="b", chunk=pb.GenerateStreamChunk(token_ids=[99])),
    ]

    async with ScriptedServer() as server, client_for(server) as client:
        first = client.generate(gen_request("a"))
        second = client.generate(gen_request("b"))
        one, two = await server.next_request(), await server.next_request()
        one.send_headers()
        two.send_headers()
        for payload in ANSWER_BYTES:
            one.send_data(grpc_message(payload))
            two.send_data(grpc_message(other[0].SerializeToString()))
        two.send_trailers()
        one.send_trailers()
        assert await read_all(first) == ANSWER
        assert await read_all(second) == other * 3


# -- answers that are not gRPC OK ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "encoded", "code", "http", "fault"),
    [
        ("5", "no%20such%20model%3A%20caf%C3%A9%20100%25", grpc.StatusCode.NOT_FOUND, 404, False),
        ("14", "worker%20draining", grpc.StatusCode.UNAVAILABLE, 503, True),
        ("3", "bad%0Aprompt", grpc.StatusCode.INVALID_ARGUMENT, 400, False),
    ],
)
async def test_trailers_only_error(
    status: str, encoded: str, code: grpc.StatusCode, http: int, fault: bool
) -> None:
    async def handler(request: Request) -> None:
        headers = [
            (":status", "200"),
            ("content-type", "application/grpc"),
            ("grpc-status", status),
            ("grpc-message", encoded),
        ]
        request.send_headers(headers, end_stream=True)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        stream = client.generate(gen_request())
        got, err = await read_until_error(stream)
        assert got == []
        assert stream.responses == 0
        assert err.code == code
        assert err.http_status == http
        assert err.worker_fault is fault
        assert err.method == "Generate"
        expected = {
            "5": "no such model: café 100%",
            "14": "worker draining",
            "3": "bad\nprompt",
        }[status]
        assert err.message == expected


@pytest.mark.parametrize(
    ("http_status", "code", "http", "fault"),
    [
        ("503", grpc.StatusCode.UNAVAILABLE, 503, True),
        ("404", grpc.StatusCode.UNIMPLEMENTED, 501, False),
        ("429", grpc.StatusCode.UNAVAILABLE, 503, True),
        ("401", grpc.StatusCode.UNAUTHENTICATED, 500, False),
        ("500", grpc.StatusCode.UNKNOWN, 500, True),
    ],
)
async def test_http_error_status(
    http_status: str, code: grpc.StatusCode, http: int, fault: bool
) -> None:
    async def handler(request: Request) -> None:
        request.send_headers([(":status", http_status), ("content-type", "text/plain")])
        request.send_data(b"go away\n", end_stream=True)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == []
        assert err.code == code
        assert err.http_status == http
        assert err.worker_fault is fault
        assert http_status in err.message


async def test_non_grpc_content_type() -> None:
    async def handler(request: Request) -> None:
        request.send_headers([(":status", "200"), ("content-type", "text/html")])
        request.send_data(b"<html>hello</html>", end_stream=True)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == []
        assert isinstance(err, MalformedResponse)
        assert err.code == grpc.StatusCode.UNKNOWN
        assert err.http_status == 502
        assert err.worker_fault


@pytest.mark.parametrize("last_frame_empty", [True, False])
async def test_data_end_stream_without_trailers(last_frame_empty: bool) -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        if last_frame_empty:
            request.send_data(grpc_message(ANSWER_BYTES[0]))
            request.send_data(b"", end_stream=True)
        else:
            request.send_data(grpc_message(ANSWER_BYTES[0]), end_stream=True)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == ANSWER[:1]  # what arrived before the bad end is still delivered
        assert isinstance(err, MalformedResponse)
        assert err.code == grpc.StatusCode.INTERNAL
        assert err.http_status == 502
        assert "trailers" in err.message


async def test_ok_trailers_after_truncated_message() -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        request.send_data(grpc_message(ANSWER_BYTES[0]) + grpc_message(ANSWER_BYTES[1])[:-2])
        request.send_trailers()

    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == ANSWER[:1]
        assert isinstance(err, MalformedResponse)
        assert err.code == grpc.StatusCode.INTERNAL
        assert err.http_status == 502


async def test_known_headers_and_trailers_are_still_checked_per_call() -> None:
    """Once a worker's usual headers and OK trailers are recognised by identity, a call that
    ends mid-message or with an error status under them still fails."""
    endings = iter(["ok", "ok", "ok", "truncated", "ok", "error"])

    async def handler(request: Request) -> None:
        ending = next(endings)
        request.send_headers()
        if ending == "truncated":
            request.send_data(grpc_message(ANSWER_BYTES[0])[:-2])
        else:
            request.send_data(grpc_message(ANSWER_BYTES[0]))
        if ending == "error":
            request.send_trailers(grpc.StatusCode.UNAVAILABLE.value[0], "overloaded")
        else:
            request.send_trailers()

    async with ScriptedServer(handler) as server, client_for(server) as client:
        for _ in range(3):  # by the third call the blocks are indexed and decoded from cache
            assert await read_all(client.generate(gen_request())) == ANSWER[:1]
        channel = client._channel
        assert isinstance(channel, NativeChannel)
        assert channel.good_headers is not None
        assert channel.ok_trailers is not None
        got, err = await read_until_error(client.generate(gen_request()))
        assert (got, type(err)) == ([], MalformedResponse)
        assert await read_all(client.generate(gen_request())) == ANSWER[:1]
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == ANSWER[:1]
        assert err.code == grpc.StatusCode.UNAVAILABLE


async def test_compressed_message_is_internal() -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        request.send_data(grpc_message(ANSWER_BYTES[0], compressed=True))

    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == []
        assert isinstance(err, MalformedResponse)
        assert err.code == grpc.StatusCode.INTERNAL
        assert err.http_status == 502
        assert "compressed" in err.message
        # The client gave up on the stream: the server is told (no trailers were ever sent).
        request = server.requests[0]
        await wait_until(lambda: request.reset_code == CANCEL)


NOT_PROTOBUF = b"\xff\xff\xff\xff"  # a truncated varint tag: no message parses from it


@pytest.mark.parametrize("transport", ["native", "grpcio"])
async def test_message_that_is_not_protobuf_is_a_502(transport: str) -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        request.send_data(grpc_message(ANSWER_BYTES[0]))
        request.send_data(grpc_message(NOT_PROTOBUF))
        request.send_data(grpc_message(ANSWER_BYTES[1]))

    async with (
        ScriptedServer(handler) as server,
        client_for(server, transport=transport) as client,
    ):
        stream = client.generate(gen_request())
        got, err = await read_until_error(stream)
        assert got == ANSWER[:1]  # the message before the bad one is delivered, none after
        assert isinstance(err, MalformedResponse)
        assert err.code == grpc.StatusCode.INTERNAL
        assert err.http_status == 502
        assert err.worker_fault
        assert "not valid protobuf" in err.message
        # The client gave up on the call: the worker is told, and the request aborted.
        request = server.requests[0]
        await wait_until(lambda: request.reset_code == CANCEL)
        await wait_until(lambda: len(server.aborts) == 1)


async def test_next_batch_stops_at_the_message_that_is_not_protobuf() -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        # Together in one frame: one good message, a bad one, another good one.
        request.send_data(
            grpc_message(ANSWER_BYTES[0])
            + grpc_message(NOT_PROTOBUF)
            + grpc_message(ANSWER_BYTES[1])
        )

    async with ScriptedServer(handler) as server, client_for(server) as client:
        stream = client.generate(gen_request())
        await wait_until(lambda: len(stream._call._messages) == 3)  # type: ignore[attr-defined]
        assert await stream.next_batch() == ANSWER[:1]
        with pytest.raises(MalformedResponse):
            await stream.next_batch()
        assert await stream.next_batch() == []
        await wait_until(lambda: server.requests[0].reset_code == CANCEL)


async def test_unary_answer_that_is_not_protobuf() -> None:
    async with ScriptedServer(answering(NOT_PROTOBUF)) as server, client_for(server) as client:
        with pytest.raises(MalformedResponse) as info:
            await client.health_check()
        assert info.value.http_status == 502
        assert info.value.method == "HealthCheck"


async def test_message_over_the_size_limit() -> None:
    limit = 1024

    def sized(size: int) -> bytes:
        """A GenerateResponse of exactly ``size`` bytes (tag + 2-byte length + id)."""
        payload = pb.GenerateResponse(request_id="r" * (size - 3)).SerializeToString()
        assert len(payload) == size
        return payload

    async def handler(request: Request) -> None:
        request.send_headers()
        request.send_data(grpc_message(sized(limit)))  # exactly at the limit: fine
        # Only the prefix and a little of an oversized message: the client must not wait for it.
        request.send_data(grpc_message(sized(limit + 1))[:100])

    async with (
        ScriptedServer(handler) as server,
        client_for(server, max_message_bytes=limit) as client,
    ):
        got, err = await read_until_error(client.generate(gen_request()))
        assert [len(r.request_id) for r in got] == [limit - 3]
        assert err.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.http_status == 429
        assert err.worker_fault
        request = server.requests[0]
        await wait_until(lambda: request.reset_code == CANCEL)


@pytest.mark.parametrize(
    ("error_code", "code", "http"),
    [
        (REFUSED_STREAM, grpc.StatusCode.UNAVAILABLE, 503),
        (CANCEL, grpc.StatusCode.CANCELLED, 500),
        (ENHANCE_YOUR_CALM, grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
        (INTERNAL_ERROR, grpc.StatusCode.INTERNAL, 500),
        (NO_ERROR, grpc.StatusCode.INTERNAL, 500),
    ],
)
async def test_rst_stream_from_the_server(
    error_code: int, code: grpc.StatusCode, http: int
) -> None:
    async def handler(request: Request) -> None:
        if len(request.conn.server.requests) == 1:
            request.send_headers()
            request.send_data(grpc_message(ANSWER_BYTES[0]))
            request.reset(error_code)
        else:
            request.reply(*ANSWER_BYTES)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == ANSWER[:1]
        assert err.code == code
        assert err.http_status == http
        assert err.worker_fault
        # Only the stream died: the connection serves the next call.
        assert await read_all(client.generate(gen_request())) == ANSWER
        assert len(server.connections) == 1


# -- connection-level events ---------------------------------------------------------------------


async def test_goaway_fails_streams_above_last_stream_id() -> None:
    async with ScriptedServer() as server, client_for(server) as client:
        below = client.generate(gen_request("below"))
        above = client.generate(gen_request("above"))
        first, second = await server.next_request(), await server.next_request()
        conn = first.conn
        assert second.conn is conn
        assert (first.stream_id, second.stream_id) == (1, 3)

        conn.goaway(last_stream_id=first.stream_id, debug=b"restarting")
        got, err = await read_until_error(above)
        assert got == []
        # Refused, not failed: safe to send again, and not the worker's fault.
        assert isinstance(err, StreamRefused)
        assert err.code == grpc.StatusCode.UNAVAILABLE
        assert err.http_status == 503
        assert not err.worker_fault
        assert "GOAWAY" in err.message
        assert above.responses == 0

        # A call started now must not use the closing connection.
        later = client.generate(gen_request("later"))
        third = await server.next_request()
        assert third.conn is not conn

        # The stream below last_stream_id still completes on the old connection …
        first.reply(*ANSWER_BYTES)
        assert await read_all(below) == ANSWER
        # … which the client then closes, having no stream left on it.
        await asyncio.wait_for(conn.closed.wait(), 3)

        third.reply(*ANSWER_BYTES)
        assert await read_all(later) == ANSWER
        assert second.reset_code is None  # refused streams are not reset
        assert len(server.connections) == 2


async def test_rst_refused_stream_before_any_answer_is_a_refusal() -> None:
    async def handler(request: Request) -> None:
        if len(request.conn.server.requests) == 1:
            request.reset(REFUSED_STREAM)
        else:
            request.reply(*ANSWER_BYTES)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        stream = client.generate(gen_request())
        got, err = await read_until_error(stream)
        assert got == []
        assert isinstance(err, StreamRefused)
        assert not err.worker_fault
        assert stream.responses == 0
        # Sent again as it is, it is served.
        assert await read_all(client.generate(gen_request())) == ANSWER


async def test_refused_call_is_served_when_sent_again_on_a_new_connection() -> None:
    async with ScriptedServer() as server, client_for(server) as client:
        stream = client.generate(gen_request("first"))
        request = await server.next_request()
        request.conn.goaway(last_stream_id=0, debug=b"max connection age")
        with pytest.raises(StreamRefused):
            await read_all(stream)
        again = client.generate(gen_request("first"))
        retried = await server.next_request()
        assert retried.conn is not request.conn
        assert pb.GenerateRequest.FromString(retried.messages()[0]).request_id == "first"
        retried.reply(*ANSWER_BYTES)
        assert await read_all(again) == ANSWER
        await asyncio.wait_for(request.conn.closed.wait(), 3)  # the refusing one is closed


async def test_enhance_your_calm_doubles_keepalive_across_reconnects() -> None:
    async with (
        ScriptedServer(answering(HEALTHY)) as server,
        channel_for(server, keepalive_time_s=3.0) as channel,
    ):
        await start_call(channel, "HealthCheck").read()
        first = server.connections[0]
        first.goaway(last_stream_id=1, error_code=ENHANCE_YOUR_CALM, debug=b"too_many_pings")
        await asyncio.wait_for(first.closed.wait(), 3)

        await start_call(channel, "HealthCheck").read()  # on a new connection
        assert len(server.connections) == 2
        [connection] = channel._connections
        assert connection.settings.keepalive_time_s == 6.0
        # A second complaint doubles it again.
        server.connections[1].goaway(last_stream_id=3, error_code=ENHANCE_YOUR_CALM)
        await asyncio.wait_for(server.connections[1].closed.wait(), 3)
        await start_call(channel, "HealthCheck").read()
        assert channel._connections[0].settings.keepalive_time_s == 12.0


async def test_connection_dropped_mid_stream_then_reconnect() -> None:
    async def handler(request: Request) -> None:
        if len(request.conn.server.connections) == 1:
            request.send_headers()
            request.send_data(grpc_message(ANSWER_BYTES[0]))
            await asyncio.sleep(0.01)
            request.conn.drop()
        else:
            request.reply(*ANSWER_BYTES)

    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == ANSWER[:1]
        assert err.code == grpc.StatusCode.UNAVAILABLE
        assert err.worker_fault
        assert await read_all(client.generate(gen_request())) == ANSWER
        assert len(server.connections) == 2


async def test_keepalive_detects_a_silent_server() -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        request.send_data(grpc_message(ANSWER_BYTES[0]))
        request.conn.freeze()  # alive at the TCP level, never answers again

    async with (
        ScriptedServer(handler) as server,
        client_for(server, keepalive_time_s=0.2, keepalive_timeout_s=0.2) as client,
    ):
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == ANSWER[:1]
        assert err.code == grpc.StatusCode.UNAVAILABLE
        assert "PING" in err.message
        frozen = server.connections[0].frozen_frames
        assert any(kind == PING and not flags & 0x1 for kind, flags, _, _ in frozen)
        # The dead connection is replaced for the next call.
        server.handler = answering(*ANSWER_BYTES)
        assert await read_all(client.generate(gen_request())) == ANSWER


async def test_keepalive_keeps_a_slow_but_live_call() -> None:
    async def handler(request: Request) -> None:
        request.send_headers()
        await asyncio.sleep(0.8)  # silent for several keep-alive periods, but answers PINGs
        request.send_data(grpc_message(ANSWER_BYTES[0]))
        request.send_trailers()

    async with (
        ScriptedServer(handler) as server,
        client_for(server, keepalive_time_s=0.1, keepalive_timeout_s=0.3) as client,
    ):
        assert await read_all(client.generate(gen_request())) == ANSWER[:1]
        assert server.connections[0].pings  # the client did probe the quiet connection


async def test_small_send_window_holds_the_request_until_granted() -> None:
    big = gen_request(prompt_tokens=20_000)
    big_size = 5 + big.ByteSize()
    assert big_size > 40_000

    async with (
        ScriptedServer(
            routes(HealthCheck=answering(HEALTHY), Generate=answered_by_the_test),
            settings={INITIAL_WINDOW_SIZE: 100},
            auto_window=False,
        ) as server,
        client_for(server) as client,
    ):
        await client.health_check()  # the connection is up and the SETTINGS applied
        await server.next_request()
        stream = client.generate(big)
        request = await server.next_request()
        conn = request.conn

        await wait_until(lambda: len(request.body) >= 100)
        await asyncio.sleep(0.05)
        assert len(request.body) == 100  # the whole window, not a byte more
        assert not request.complete.is_set()

        conn.grant(request.stream_id, 1000)
        await wait_until(lambda: len(request.body) >= 1100)
        await asyncio.sleep(0.05)
        assert len(request.body) == 1100

        conn.grant(request.stream_id, big_size)
        await asyncio.wait_for(request.complete.wait(), 3)
        assert len(request.body) == big_size
        assert [pb.GenerateRequest.FromString(m) for m in request.messages()] == [big]

        request.reply(*ANSWER_BYTES)
        assert await read_all(stream) == ANSWER


@pytest.mark.parametrize("over", [0, 1])
async def test_a_request_the_size_of_the_window_goes_out_whole(over: int) -> None:
    request_message = gen_request(prompt_tokens=3_000)
    size = 5 + request_message.ByteSize()
    async with (
        ScriptedServer(
            routes(HealthCheck=answering(HEALTHY), Generate=answered_by_the_test),
            settings={INITIAL_WINDOW_SIZE: size - over},
            auto_window=False,
        ) as server,
        client_for(server) as client,
    ):
        await client.health_check()  # the connection is up and the SETTINGS applied
        await server.next_request()
        stream = client.generate(request_message)
        request = await server.next_request()
        await wait_until(lambda: len(request.body) >= size - over)
        await asyncio.sleep(0.05)
        assert len(request.body) == size - over
        assert request.complete.is_set() == (not over)
        request.conn.grant(request.stream_id, size)
        await asyncio.wait_for(request.complete.wait(), 3)
        assert [pb.GenerateRequest.FromString(m) for m in request.messages()] == [request_message]
        request.reply(*ANSWER_BYTES)
        assert await read_all(stream) == ANSWER


async def test_max_concurrent_streams_opens_a_second_connection() -> None:
    both_arrived = asyncio.Event()
    generates: list[Request] = []

    async def generate(request: Request) -> None:
        generates.append(request)
        if len(generates) == 2:
            both_arrived.set()
        await both_arrived.wait()  # each call holds its stream until the other one arrived
        request.reply(*ANSWER_BYTES)

    handler = routes(HealthCheck=answering(HEALTHY), Generate=generate)
    async with (
        ScriptedServer(handler, settings={MAX_CONCURRENT_STREAMS: 1}) as server,
        client_for(server) as client,
    ):
        await client.health_check()  # the client has seen the limit
        results = await asyncio.gather(
            read_all(client.generate(gen_request("a"))),
            read_all(client.generate(gen_request("b"))),
        )
        assert results == [ANSWER, ANSWER]
        assert len(server.connections) == 2
        assert generates[0].conn is not generates[1].conn
        # The server (h2) would have failed a connection carrying more than one stream.
        assert not server.errors


# -- deadlines and ending a call early -----------------------------------------------------------


async def test_deadline_exceeded_against_a_server_that_never_answers() -> None:
    async with ScriptedServer() as server:
        async with client_for(server) as client:
            loop = asyncio.get_running_loop()
            started = loop.time()
            stream = client.generate(gen_request("slow"), timeout_s=0.5)
            got, err = await read_until_error(stream)
            elapsed = loop.time() - started
            assert got == []
            assert err.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert err.http_status == 504
            assert 0.4 <= elapsed < 3.0

            request = server.requests[0]
            timeout = request.headers["grpc-timeout"]
            assert timeout.endswith("m")
            assert 300 <= int(timeout[:-1]) <= 500
            await wait_until(lambda: request.reset_code == CANCEL)
        # Leaving the client waited for the background Abort of the request.
        assert [pb.AbortRequest.FromString(r.messages()[0]).request_id for r in server.aborts] == [
            "slow"
        ]


async def test_a_later_deadline_still_fires_after_an_earlier_call_ended() -> None:
    async with ScriptedServer() as server, channel_for(server) as channel:
        loop = asyncio.get_running_loop()
        started = loop.time()
        early = start_call(channel, timeout=0.2)  # the board's timer is due at its deadline
        late = start_call(channel, timeout=0.6)
        (await server.next_request()).reply(*ANSWER_BYTES)
        assert await early.read() == ANSWER[0]
        while await early.read() is not None:
            pass
        await server.next_request()  # the late call's request: never answered
        with pytest.raises(WorkerCallError) as caught:
            async with asyncio.timeout(5):
                await late.read()
        assert caught.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert loop.time() - started >= 0.55
        assert not channel.deadlines._pending


async def test_calls_leave_the_deadline_board_however_they_end() -> None:
    async with ScriptedServer() as server, channel_for(server) as channel:
        answered = start_call(channel, timeout=30)
        cancelled = start_call(channel, timeout=30)
        released = start_call(channel, timeout=30)
        requests = [await server.next_request() for _ in range(3)]
        assert len(channel.deadlines._pending) == 3
        requests[0].reply(*ANSWER_BYTES)
        while await answered.read() is not None:
            pass
        cancelled.cancel()
        released.release()  # its deadline gives way to the release grace
        assert not channel.deadlines._pending
        released.cancel()


async def test_cancel_resets_the_stream() -> None:
    async with ScriptedServer() as server, channel_for(server) as channel:
        call, request = await answered_once(server, channel, 0)

        call.cancel()
        assert call.done()
        assert await call.read() is None
        await wait_until(lambda: request.reset_code == CANCEL)
        # The connection lives on.
        follow_up = start_call(channel)
        (await server.next_request()).reply(*ANSWER_BYTES)
        assert await follow_up.read() == ANSWER[0]
        assert len(server.connections) == 1


async def test_generate_stream_close_resets_and_aborts() -> None:
    async with ScriptedServer() as server:
        async with client_for(server) as client:
            stream = client.generate(gen_request("closing"))
            request = await server.next_request()
            request.send_headers()
            request.send_data(grpc_message(ANSWER_BYTES[0]))
            assert await anext(stream) == ANSWER[0]
            await stream.aclose()
            await wait_until(lambda: request.reset_code == CANCEL)
        assert [pb.AbortRequest.FromString(r.messages()[0]).request_id for r in server.aborts] == [
            "closing"
        ]


async def test_release_waits_for_the_trailers(monkeypatch: pytest.MonkeyPatch) -> None:
    # A grace far longer than the pause before the trailers: a loaded machine must not let it
    # run out in between.
    monkeypatch.setattr(native_module, "_RELEASE_GRACE_S", 1.0)
    async with ScriptedServer() as server, channel_for(server) as channel:
        call, request = await answered_once(server, channel, 2)

        call.release()
        await asyncio.sleep(0.05)
        assert not call.done()
        request.send_trailers()
        await wait_until(call.done)
        assert await call.read() is None
        await asyncio.sleep(1.1)  # past the grace: nothing more happens
        assert request.reset_code is None
        assert server.connections[0].error is None


async def test_release_cancels_after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_module, "_RELEASE_GRACE_S", 0.2)
    async with ScriptedServer() as server, channel_for(server) as channel:
        call, request = await answered_once(server, channel, 2)

        loop = asyncio.get_running_loop()
        released = loop.time()
        call.release()
        await wait_until(lambda: request.reset_code == CANCEL)
        assert loop.time() - released >= 0.15
        assert call.done()
        assert await call.read() is None


# -- control frames and HPACK --------------------------------------------------------------------


async def test_server_ping_is_acknowledged() -> None:
    async with (
        ScriptedServer(answering(HEALTHY)) as server,
        client_for(server) as client,
    ):
        await client.health_check()
        conn = server.connections[0]
        conn.ping(b"8 bytes!")
        await wait_until(lambda: conn.ping_acks == [b"8 bytes!"])


async def test_server_settings_are_acknowledged_and_applied() -> None:
    big = gen_request(prompt_tokens=30_000)
    seen: list[pb.GenerateRequest] = []

    async def generate(request: Request) -> None:
        seen.extend(pb.GenerateRequest.FromString(m) for m in request.messages())
        request.reply(*ANSWER_BYTES)

    handler = routes(HealthCheck=answering(HEALTHY), Generate=generate)
    async with ScriptedServer(handler) as server, client_for(server) as client:
        await client.health_check()
        conn = server.connections[0]
        await wait_until(lambda: conn.settings_acks == 1)  # the preface's SETTINGS

        conn.update_settings({MAX_FRAME_SIZE: 32_768, HEADER_TABLE_SIZE: 256})
        await wait_until(lambda: conn.settings_acks == 2)
        assert await read_all(client.generate(big)) == ANSWER
        assert seen == [big]
        # The client's encoder keeps its dynamic table at 0 (set in its first block), within
        # any size the server allows.
        assert conn.h2.decoder.header_table_size == 0
        # h2 refuses frames above its acknowledged MAX_FRAME_SIZE, so larger ones were used
        # only within the new limit (h2 would have failed the connection otherwise).
        assert conn.error is None


async def test_hpack_state_across_many_calls_on_one_connection() -> None:
    statuses = [0, 5, 14, 3, 0, 9]

    async def handler(request: Request) -> None:
        index = int(request.method.removeprefix("Method"))
        status = statuses[index % len(statuses)]
        request.send_headers(
            [
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("x-call", str(index)),
                ("x-blob", f"{index}-" + "v" * (index % 97) * 3),  # churns the dynamic table
                ("x-fixed", "same every time"),
            ]
        )
        if status == 0:
            message = pb.HealthCheckResponse(healthy=True, message=f"ok {index}")
            request.send_data(grpc_message(message.SerializeToString()))
            request.send_trailers()
        else:
            request.send_trailers(status, f"call%20{index}%20%E2%9C%93")

    async with ScriptedServer(handler) as server, channel_for(server) as channel:
        for index in range(200):
            method = f"Method{index}"
            call = channel.call(
                method,
                f"/turnout.test.Svc/{method}",
                pb.HealthCheckRequest(),
                pb.HealthCheckResponse,
                5.0 + index,
            )
            status = statuses[index % len(statuses)]
            if status == 0:
                response = await call.read()
                assert response.message == f"ok {index}"
                assert await call.read() is None
            else:
                with pytest.raises(WorkerCallError) as info:
                    await call.read()
                assert info.value.code.value[0] == status
                assert info.value.message == f"call {index} ✓"
        assert len(server.connections) == 1
        paths = [r.path for r in server.requests]
        assert paths == [f"/turnout.test.Svc/Method{i}" for i in range(200)]
        timeouts = [r.headers["grpc-timeout"] for r in server.requests]
        assert all(t.endswith("m") for t in timeouts)


async def test_headers_of_a_reset_stream_still_update_hpack_state() -> None:
    """A header block for a stream the client already reset must still be decoded."""
    async with ScriptedServer() as server, channel_for(server) as channel:
        dropped = start_call(channel)
        first = await server.next_request()
        dropped.cancel()
        await wait_until(lambda: first.reset_code == CANCEL)

        kept = start_call(channel)
        second = await server.next_request()
        # h2 would not answer a reset stream: encode with its encoder (so its HPACK state moves
        # on) and send the frame raw. It adds entries that the next block refers to by index.
        conn = first.conn
        conn.flush()
        block = conn.h2.encoder.encode(
            [(":status", "200"), ("content-type", "application/grpc"), ("x-shared", "abc" * 20)]
        )
        conn.send_frame(HEADERS, 0x4, first.stream_id, block)
        second.send_headers(
            [(":status", "200"), ("content-type", "application/grpc"), ("x-shared", "abc" * 20)]
        )
        second.send_data(grpc_message(ANSWER_BYTES[0]))
        second.send_trailers()
        assert await kept.read() == ANSWER[0]
        assert await kept.read() is None


# -- malformed frames ----------------------------------------------------------------------------


MALFORMED: dict[str, tuple[Callable[[int], list[tuple[int, int, int, bytes]]], int]] = {
    "window-update-bad-length": (
        lambda sid: [(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01")],
        PROTOCOL_ERROR,
    ),
    "push-promise": (
        lambda sid: [(PUSH_PROMISE, 0x4, sid, b"\x00\x00\x00\x02\x88")],
        PROTOCOL_ERROR,
    ),
    "data-on-stream-0": (lambda sid: [(DATA, 0, 0, b"abc")], PROTOCOL_ERROR),
    "ping-bad-length": (lambda sid: [(PING, 0, 0, b"1234")], PROTOCOL_ERROR),
    "settings-bad-length": (lambda sid: [(SETTINGS, 0, 0, b"\x00\x04\x00")], PROTOCOL_ERROR),
    "padding-exceeds-frame": (lambda sid: [(DATA, 0x8, sid, b"\x0aabc")], PROTOCOL_ERROR),
    "bad-hpack-index": (lambda sid: [(HEADERS, 0x4, sid, b"\xff\xff\x7f")], COMPRESSION_ERROR),
    "continuation-without-headers": (
        lambda sid: [(CONTINUATION, 0x4, sid, b"\x88")],
        PROTOCOL_ERROR,
    ),
    "data-inside-header-block": (
        lambda sid: [(HEADERS, 0, sid, b"\x88"), (DATA, 0, sid, b"\x00\x00\x00\x00\x00")],
        PROTOCOL_ERROR,
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_malformed_frame_fails_the_connection(case: str) -> None:
    frames, error_code = MALFORMED[case]

    async def generate(request: Request) -> None:
        for kind, flags, stream_id, payload in frames(request.stream_id):
            request.conn.send_frame(kind, flags, stream_id, payload)

    handler = routes(Generate=generate, HealthCheck=answering(HEALTHY))
    async with ScriptedServer(handler) as server, client_for(server) as client:
        got, err = await read_until_error(client.generate(gen_request()))
        assert got == []
        assert err.code == grpc.StatusCode.UNAVAILABLE
        assert err.worker_fault
        conn = server.connections[0]
        await asyncio.wait_for(conn.closed.wait(), 3)
        assert conn.terminated is not None, "the client closed without a GOAWAY"
        assert conn.terminated.error_code == error_code
        # The next call gets a fresh connection.
        assert (await client.health_check()).healthy
        assert len(server.connections) == 2


# -- receive flow control: what a reader does not take is not sent --------------------------------

WINDOW = 64 * 1024  # the smallest stream window the client accepts


def chunk_message(index: int, size: int) -> bytes:
    """A serialized GenerateResponse of about ``size`` bytes, numbered ``index``."""
    return pb.GenerateResponse(request_id=f"{index}:" + "x" * size).SerializeToString()


class Sender:
    """Sends a stream's gRPC messages as fast as the client's flow-control window allows."""

    def __init__(self, request: Request, messages: list[bytes], frame: int = 16_384) -> None:
        self.request = request
        self.body = b"".join(grpc_message(m) for m in messages)
        self.frame = frame
        self.sent = 0
        self.finished = asyncio.Event()

    def window(self) -> int:
        conn = self.request.conn
        return int(conn.h2.local_flow_control_window(self.request.stream_id))

    async def run(self) -> None:
        self.request.send_headers()
        while self.sent < len(self.body):
            size = min(self.window(), self.frame, len(self.body) - self.sent)
            if size <= 0:
                await asyncio.sleep(0.005)  # blocked by flow control
                continue
            self.request.send_data(self.body[self.sent : self.sent + size])
            self.sent += size
            await asyncio.sleep(0)
        self.request.send_trailers()
        self.finished.set()


async def test_a_reader_that_stops_reading_pauses_the_worker() -> None:
    messages = [chunk_message(i, 1000) for i in range(1000)]  # ~1 MB in all
    senders: list[Sender] = []

    async def handler(request: Request) -> None:
        senders.append(Sender(request, messages))
        await senders[-1].run()

    async with (
        ScriptedServer(handler) as server,
        client_for(server, stream_window_bytes=WINDOW) as client,
    ):
        stream = client.generate(gen_request())
        first = await anext(stream)
        assert first.request_id.startswith("0:")
        await wait_until(lambda: bool(senders) and senders[0].window() <= 0)
        sender = senders[0]
        await asyncio.sleep(0.2)  # the reader sleeps: no credit comes back
        assert sender.window() <= 0
        # What the client holds is bounded by the window, not by the answer.
        assert sender.sent <= 2 * WINDOW
        assert not sender.finished.is_set()
        # The reader comes back: everything arrives, in order.
        got = [first, *await read_all(stream)]
        assert [r.request_id.partition(":")[0] for r in got] == [str(i) for i in range(1000)]
        assert sender.finished.is_set()
        assert not server.errors  # h2 saw no flow-control violation


async def test_batches_are_sliced_and_the_loop_runs_between_them() -> None:
    messages = [chunk_message(i, 2000) for i in range(100)]  # ~200 KB queued at once
    body = b"".join(grpc_message(m) for m in messages)

    async with ScriptedServer() as server, client_for(server) as client:
        stream = client.generate(gen_request())
        request = await server.next_request()
        request.send_headers()
        for start in range(0, len(body), 16_384):
            request.send_data(body[start : start + 16_384])
        request.send_trailers()
        await wait_until(stream._call.done)  # type: ignore[attr-defined]

        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        batches: list[tuple[int, int]] = []  # (messages, ticks seen before the batch)
        while batch := await stream.next_batch():
            batches.append((len(batch), ticks))
        task.cancel()
        assert sum(size for size, _ in batches) == 100
        assert len(batches) >= 3
        assert all(size * 2000 <= native_module.BATCH_BYTES for size, _ in batches)
        # Other tasks ran between one slice and the next.
        seen = [at for _, at in batches]
        assert all(later > earlier for earlier, later in itertools.pairwise(seen))


async def test_a_message_larger_than_the_window_is_received() -> None:
    small, big = chunk_message(0, 100), chunk_message(1, 5 * WINDOW)
    senders: list[Sender] = []

    async def handler(request: Request) -> None:
        senders.append(Sender(request, [small, big]))
        await senders[-1].run()

    async with (
        ScriptedServer(handler) as server,
        client_for(server, stream_window_bytes=WINDOW) as client,
    ):
        stream = client.generate(gen_request())
        # Nobody reads: the small message waits, so the big one is held at the window …
        await wait_until(lambda: bool(senders) and senders[0].window() <= 0)
        assert not senders[0].finished.is_set()
        # … until the reader takes the small one; then the big one comes whole.
        assert [len(r.request_id) for r in await read_all(stream)] == [102, 5 * WINDOW + 2]


async def test_one_stalled_reader_does_not_stall_other_calls() -> None:
    """The connection window is credited as data arrives: a stream nobody reads holds only
    its own window, and a later call receives more than the connection window."""
    stalled = [chunk_message(i, 1000) for i in range(200)]
    flowing = [chunk_message(i, 16_000) for i in range(1100)]  # ~17.6 MB > 16 MiB

    async def handler(request: Request) -> None:
        messages = stalled if len(server.requests) == 1 else flowing
        await Sender(request, messages).run()

    async with (
        ScriptedServer(handler) as server,
        client_for(server, stream_window_bytes=WINDOW) as client,
    ):
        idle = client.generate(gen_request("idle"))
        await server.next_request()
        busy = client.generate(gen_request("busy"))
        count = 0
        async with asyncio.timeout(30):
            async for _ in busy:
                count += 1
        assert count == len(flowing)
        assert len(await read_all(idle)) == len(stalled)
        assert len(server.connections) == 1


async def test_large_message_over_many_small_frames_is_reassembled_in_linear_time() -> None:
    """32 MiB in 4 KiB DATA frames: concatenating the partial message per frame (quadratic,
    a minute) misses the generous bound; gathering it in one buffer takes about a second."""
    size = 32 * 1024 * 1024
    big = chunk_message(0, size)

    async def handler(request: Request) -> None:
        await Sender(request, [big], frame=4096).run()

    async with ScriptedServer(handler) as server, client_for(server) as client:
        async with asyncio.timeout(20):
            [response] = await read_all_unbounded(client.generate(gen_request()))
        assert len(response.request_id) == size + 2


async def read_all_unbounded(stream: GenerateStream) -> list[pb.GenerateResponse]:
    return [response async for response in stream]
