"""The relay's HTTP/1.1 client against scripted upstreams on real sockets: bodies however the
bytes are split, upstreams that close mid-answer or between requests, the pool's reuse,
expiry and bound, flow control and the idle deadline."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.multimodal.images_server import make_authority
from turnout.http_workers.settings import HttpWorkersSettings
from turnout.http_workers.upstream_client import (
    ConnectError,
    Origin,
    PoolTimeout,
    ReadError,
    ReadTimeout,
    RemoteProtocolError,
    UpstreamClient,
    UpstreamClosed,
    UpstreamResponse,
)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

BODY = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


CHUNKED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    + chunked(BODY[:20], BODY[20:])
)
SIZED = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """One request's head and body; None once the client closed the connection."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


class Upstream:
    """A scripted HTTP server on a real socket: ``handler`` serves each connection, which is
    closed when it returns."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.closed_by_client = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
            if reader.at_eof():
                self.closed_by_client += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            self.closed_by_client += 1
        finally:
            writer.close()

    @asynccontextmanager
    async def running(self, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=tls)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"https://localhost:{port}" if tls else f"http://127.0.0.1:{port}"
        finally:
            server.close()


def answering(*answers: bytes) -> Handler:
    """Each request on a connection is answered by the next of ``answers`` (the last repeats)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served = 0
        while await read_request(reader) is not None:
            writer.write(answers[min(served, len(answers) - 1)])
            served += 1
            await writer.drain()

    return handle


@asynccontextmanager
async def client_of(
    tls: ssl.SSLContext | None = None, **settings: Any
) -> AsyncIterator[UpstreamClient]:
    client = UpstreamClient(HttpWorkersSettings(**settings), ssl_context=tls)
    try:
        yield client
    finally:
        await client.aclose()


async def post(client: UpstreamClient, url: str, body: bytes = b"{}") -> UpstreamResponse:
    return await client.request(Origin(url), "POST", "/v1/chat/completions", [], body)


async def read_all(response: UpstreamResponse) -> bytes:
    pieces = []
    while piece := await response.read():
        pieces.append(piece)
    return b"".join(pieces)


@pytest.mark.parametrize("answer", [CHUNKED, SIZED], ids=["chunked", "content-length"])
async def test_an_answer_split_at_every_byte_reads_the_same(answer: bytes) -> None:
    splits = asyncio.Queue[int]()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            at = splits.get_nowait()
            writer.write(answer[:at])
            await writer.drain()
            await asyncio.sleep(0.002)  # the client reads the first part on its own
            writer.write(answer[at:])
            await writer.drain()

    upstream = Upstream(handle)
    async with upstream.running() as url, client_of() as client:
        for at in range(1, len(answer)):
            splits.put_nowait(at)
            response = await post(client, url)
            assert response.status == 200
            assert await read_all(response) == BODY, at
        # Every answer was read whole: one connection served them all.
        assert upstream.connections == 1
        assert client.idle_connections(url) == 1


async def test_pieces_are_handed_on_as_they_arrive() -> None:
    go_on = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED[: CHUNKED.index(b"\r\n\r\n") + 4] + chunked(b"first")[:-5])
        await go_on.wait()
        writer.write(chunked(b"second"))
        await writer.drain()

    async with Upstream(handle).running() as url, client_of() as client:
        response = await post(client, url)
        assert response.content_type == "text/event-stream"
        assert await response.read() == b"first"
        go_on.set()
        assert await read_all(response) == b"second"


@pytest.mark.parametrize(
    "cut",
    [SIZED[:-10], CHUNKED[:-12], CHUNKED[:-3]],
    ids=["content-length", "chunked", "chunked-last-chunk"],
)
async def test_an_upstream_closing_mid_body_fails_the_read(cut: bytes) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(cut)
        await writer.drain()
        writer.close()

    async with Upstream(handle).running() as url, client_of() as client:
        response = await post(client, url)
        with pytest.raises(ReadError, match="before the answer's end"):
            await read_all(response)
        assert (client.open, client.idle) == (0, 0)


async def test_a_body_that_ends_with_the_connection_is_whole() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n" + BODY)
        await writer.drain()
        writer.close()

    async with Upstream(handle).running() as url, client_of() as client:
        assert await read_all(await post(client, url)) == BODY
        assert (client.open, client.idle) == (0, 0)


async def test_a_connection_is_reused_until_it_expires() -> None:
    upstream = Upstream(answering(SIZED))
    async with upstream.running() as url, client_of(keepalive_expiry_s=0.2) as client:
        for _ in range(3):
            assert await read_all(await post(client, url)) == BODY
        assert upstream.connections == 1
        await asyncio.sleep(0.5)
        # Closed by the client once idle past the expiry, not when next needed.
        assert (client.open, client.idle) == (0, 0)
        assert upstream.closed_by_client == 1
        assert await read_all(await post(client, url)) == BODY
        assert upstream.connections == 2


async def test_a_connection_the_upstream_closed_while_idle_is_not_taken() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SIZED)  # kept alive by HTTP/1.1's default, then closed at once
        await writer.drain()
        writer.close()

    upstream = Upstream(handle)
    async with upstream.running() as url, client_of() as client:
        assert await read_all(await post(client, url)) == BODY
        assert client.idle_connections(url) == 1
        await asyncio.sleep(0.05)  # the close arrives
        assert await read_all(await post(client, url)) == BODY
        assert upstream.connections == 2


async def test_a_reused_connection_closed_before_the_answer_is_upstream_closed() -> None:
    """The keep-alive race: the upstream closes a connection as the next request arrives.
    Nothing of it ran (the caller sends it again); on a new connection it is the upstream's
    failure."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SIZED)
        await writer.drain()
        await read_request(reader)  # the second request: closed unanswered

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with Upstream(handle).running() as url, client_of() as client:
        assert await read_all(await post(client, url)) == BODY
        with pytest.raises(UpstreamClosed):
            await post(client, url)
        assert await read_all(await post(client, url)) == BODY  # sent again: a new connection
    async with Upstream(refuse).running() as url, client_of() as client:
        with pytest.raises(ReadError, match="before answering"):
            await post(client, url)


async def test_a_connection_closed_by_its_reader_is_not_reused() -> None:
    upstream = Upstream(answering(CHUNKED))
    async with upstream.running() as url, client_of() as client:
        response = await post(client, url)
        response.close()
        assert await response.read() == b""
        await asyncio.sleep(0.05)
        assert upstream.closed_by_client == 1
        assert (client.open, client.idle) == (0, 0)


async def test_a_lagging_reader_pauses_the_socket() -> None:
    big = bytes(range(256)) * 8192  # 2 MiB

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(big))
        for at in range(0, len(big), 65536):
            writer.write(big[at : at + 65536])
            await writer.drain()

    async with Upstream(handle).running() as url, client_of() as client:
        response = await post(client, url)
        await asyncio.sleep(0.3)  # the upstream writes what the socket takes meanwhile
        connection = response._connection
        assert connection is not None
        assert connection._paused
        assert connection._buffered < 2 * 256 * 1024
        assert await read_all(response) == big


async def test_a_silent_upstream_fails_after_the_idle_timeout() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(CHUNKED[:-20])
        await writer.drain()
        await asyncio.sleep(5)

    async with Upstream(handle).running() as url, client_of(idle_timeout_s=0.2) as client:
        response = await post(client, url)
        with pytest.raises(ReadTimeout):
            await read_all(response)


async def test_garbage_is_a_protocol_error_and_a_refused_port_a_connect_error() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    async with Upstream(handle).running() as url, client_of() as client:
        with pytest.raises(RemoteProtocolError):
            await post(client, url)
    with pytest.raises(ConnectError):
        async with client_of() as client:
            await post(client, url)  # the server is gone: its port refuses


async def test_the_pool_is_bounded() -> None:
    upstream = Upstream(answering(CHUNKED[:-5]))  # never ends: the connection stays busy
    async with (
        upstream.running() as url,
        client_of(max_connections=1, pool_timeout_s=0.2) as client,
    ):
        busy = await post(client, url)
        with pytest.raises(PoolTimeout):
            await post(client, url)
        # A request waiting for a connection takes the one freed.
        waiting = asyncio.create_task(post(client, url))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        busy.close()
        assert (await asyncio.wait_for(waiting, 0.15)).status == 200


async def test_an_idle_connection_makes_way_for_another_origin() -> None:
    first, second = Upstream(answering(SIZED)), Upstream(answering(SIZED))
    async with (
        first.running() as one,
        second.running() as other,
        client_of(max_connections=1, pool_timeout_s=0.2) as client,
    ):
        assert await read_all(await post(client, one)) == BODY
        assert client.idle_connections(one) == 1
        assert await read_all(await post(client, other)) == BODY
        assert (client.idle_connections(one), client.idle_connections(other)) == (0, 1)
        assert client.open == 1


async def test_an_https_upstream(tmp_path: Path) -> None:
    """TLS with the client's one context; a certificate it does not trust is a connect error."""
    authority = make_authority(tmp_path)
    upstream = Upstream(answering(CHUNKED))
    async with upstream.running(authority.server_context()) as url:
        async with client_of(authority.client_context()) as client:
            for _ in range(2):
                assert await read_all(await post(client, url)) == BODY
            assert upstream.connections == 1
        async with client_of() as client:
            with pytest.raises(ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await post(client, url)


def test_user_info_is_basic_auth_and_never_shown() -> None:
    from turnout.http_workers.connection import HttpClient, HttpConnection
    from turnout.workers.settings import WorkerSpec

    spec = WorkerSpec(url="http://me:p%40ss@127.0.0.1:9/v1")
    connection = HttpConnection(spec, HttpClient(HttpWorkersSettings()))
    assert connection.auth_headers() == {"authorization": "Basic bWU6cEBzcw=="}  # me:p@ss
    assert connection.origin.url == "http://127.0.0.1:9"
