"""The load generator's HTTP client and SSE reader against a real socket server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from bench.httpclient import HttpConnection, HttpError
from bench.workload import read_sse_answer

SSE_EVENTS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"choices": [{"index": 0, "delta": {"content": "hello"}}]},
    {"choices": [{"index": 0, "delta": {"content": " world"}}]},
    {"choices": [], "usage": {"completion_tokens": 2}},
]


def _sse_chunks() -> list[bytes]:
    text = "".join(f"data: {json.dumps(e)}\n\n" for e in SSE_EVENTS) + "data: [DONE]\n\n"
    raw = text.encode()
    # split at awkward places: inside "data:" and inside a JSON object
    return [raw[:3], raw[3:50], raw[50:51], raw[51:]]


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        request_line = await reader.readline()
        if not request_line:
            break
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        body = await reader.readexactly(length)
        path = request_line.split()[1]
        if path == b"/echo":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        elif path == b"/sse":
            writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for chunk in _sse_chunks():
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
        elif path == b"/close":
            writer.write(b"HTTP/1.1 500 Oops\r\nconnection: close\r\n\r\nbye")
            await writer.drain()
            writer.close()
            return
        elif path == b"/truncated":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort")
            await writer.drain()
            writer.close()
            return
        await writer.drain()
    writer.close()


@pytest.fixture
async def server() -> AsyncIterator[int]:
    srv = await asyncio.start_server(_handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield port


async def test_keep_alive_reuses_one_connection(server: int) -> None:
    conn = HttpConnection("127.0.0.1", server)
    first = await conn.request("POST", "/echo", b'{"a": 1}')
    assert (first.status, await first.read()) == (200, b'{"a": 1}')
    writer = conn._writer
    second = await conn.request("POST", "/echo", b"xyz")
    assert await second.read() == b"xyz"
    assert conn._writer is writer
    conn.close()


async def test_chunked_sse_is_reassembled(server: int) -> None:
    async with HttpConnection("127.0.0.1", server) as conn:
        response = await conn.request("POST", "/sse", b"{}")
        outcome = await read_sse_answer(response.iter_body())
        assert outcome.error is None
        assert outcome.tokens == 2  # from the usage chunk
        assert outcome.first_token_at is not None
        again = await conn.request("POST", "/echo", b"ok")  # connection still usable
        assert await again.read() == b"ok"


async def test_connection_close_body_then_reconnect(server: int) -> None:
    async with HttpConnection("127.0.0.1", server) as conn:
        response = await conn.request("GET", "/close")
        assert response.status == 500
        assert await response.read() == b"bye"
        assert conn._writer is None
        after = await conn.request("POST", "/echo", b"back")
        assert await after.read() == b"back"


async def test_truncated_body_is_an_error(server: int) -> None:
    async with HttpConnection("127.0.0.1", server) as conn:
        response = await conn.request("GET", "/truncated")
        with pytest.raises(HttpError, match="closed before the body was complete"):
            await response.read()


async def test_refused_connection_raises() -> None:
    srv = await asyncio.start_server(_handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    with pytest.raises(HttpError, match="cannot connect"):
        await HttpConnection("127.0.0.1", port).request("GET", "/echo")


async def _pieces(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def test_sse_error_event_and_missing_done() -> None:
    error = await read_sse_answer(
        _pieces(b'data: {"error": {"message": "worker died"}}\n\ndata: [DONE]\n\n')
    )
    assert error.error == "worker died"
    cut = await read_sse_answer(_pieces(b'data: {"text": "a", "output_ids": [5]}\n\n'))
    assert cut.error == "stream ended without [DONE]"
    empty = await read_sse_answer(_pieces(b"data: [DONE]\n\n"))
    assert empty.error == "stream carried no output"
