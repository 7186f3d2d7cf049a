"""The head of an SSE answer on the wire, through the real router under the connection guard:
status line and header fields byte for byte as they were when Litestar built the stream's
response (only the date and the request id vary), for a chat stream and a Responses stream."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator

import pytest

from tests.server.harness import MODEL, Router, run_router

#: The head of every SSE answer (the date and the request id masked), as captured before the
#: stream became a bare ASGI answer.
HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"date: *\r\n"
    b"server: uvicorn\r\n"
    b"cache-control: no-cache\r\n"
    b"x-accel-buffering: no\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\n"
    b"x-request-id: *\r\n"
    b"transfer-encoding: chunked\r\n"
    b"\r\n"
)


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with run_router(sims=1, guarded=True) as running:
        yield running


def stream_head(router: Router, path: str, body: dict[str, object]) -> bytes:
    """The head of the answer to a streamed POST of ``body``, read off a raw socket."""
    data = json.dumps(body).encode()
    request = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    ).encode() + data
    with socket.create_connection(("127.0.0.1", router.port), timeout=10) as sock:
        sock.sendall(request)
        received = b""
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk
    head = received[: received.index(b"\r\n\r\n") + 4]
    head = re.sub(rb"\r\ndate: [^\r]*", b"\r\ndate: *", head)
    return re.sub(rb"\r\nx-request-id: [^\r]*", b"\r\nx-request-id: *", head)


def test_a_chat_stream_has_the_same_head_as_before(router: Router) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    assert stream_head(router, "/v1/chat/completions", body) == HEAD


def test_a_responses_stream_has_the_same_head_as_before(router: Router) -> None:
    body = {"model": MODEL, "input": "hi", "stream": True, "max_output_tokens": 4}
    assert stream_head(router, "/v1/responses", body) == HEAD
