"""Streams over real sockets under the connection guard of ``turnout serve``, whose pieces go
straight to the connection (:class:`~turnout.server.direct_body.DirectBody`): chunked framing
a client parses, the connection reused after a stream, a client that stops reading pauses its
worker's stream (bounded buffering), and a client that leaves aborts it."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .harness import MODEL, Router, run_router

DEADLINE_S = 20.0


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    with run_router(sims=1, guarded=True) as running:
        yield running


@pytest.fixture(autouse=True)
def reset_knobs(router: Router) -> Iterator[None]:
    yield
    router.sims[0].knobs.update({"delay_ms": 0.0})


def post(sock: socket.socket, body: dict[str, Any], request_id: str) -> None:
    payload = json.dumps({"model": MODEL, **body}).encode()
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: turnout\r\ncontent-type: application/json\r\n"
        b"x-request-id: %b\r\ncontent-length: %d\r\n\r\n%b"
        % (request_id.encode(), len(payload), payload)
    )


class Reader:
    """Reads HTTP/1.1 responses off a socket, one after the other."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        sock.settimeout(DEADLINE_S)

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise AssertionError("the connection closed")
        self.buffer += data

    def _take_line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            self._fill()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    def _take(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def response(self) -> tuple[int, dict[str, str], list[bytes]]:
        """Status, headers and the body's chunks (one piece for a content-length body)."""
        status = int(self._take_line().split()[1])
        headers: dict[str, str] = {}
        while line := self._take_line():
            name, _, value = line.decode().partition(":")
            headers[name.lower()] = value.strip()
        if "content-length" in headers:
            return status, headers, [self._take(int(headers["content-length"]))]
        assert headers["transfer-encoding"] == "chunked"
        chunks = []
        while size := int(self._take_line(), 16):
            chunks.append(self._take(size))
            assert self._take(2) == b"\r\n"
        assert self._take(2) == b"\r\n"
        return status, headers, chunks


def events(chunks: list[bytes]) -> list[str]:
    """The ``data:`` payloads of an SSE body; each chunk holds whole events."""
    found = []
    for chunk in chunks:
        assert chunk.endswith(b"\n\n")
        found += [e.removeprefix(b"data: ").decode() for e in chunk[:-2].split(b"\n\n")]
    return found


def outcome_of(router: Router, request_id: str) -> str | None:
    for rid, outcome in router.sims[0].records.outcomes.items():
        if rid.startswith(request_id + "-"):
            return outcome
    return None


def generated_of(router: Router, request_id: str) -> int:
    for rid, tokens in router.sims[0].records.generated.items():
        if rid.startswith(request_id + "-"):
            return tokens
    return 0


def test_a_stream_is_well_framed_and_its_connection_serves_the_next_request(
    router: Router,
) -> None:
    with socket.create_connection(("127.0.0.1", router.port)) as sock:
        reader = Reader(sock)
        for round_ in range(2):
            body = {"messages": [{"role": "user", "content": "echo these words back please"}]}
            post(sock, {**body, "stream": True, "max_tokens": 6}, f"framed-{round_}")
            status, headers, chunks = reader.response()
            assert status == 200
            assert headers["content-type"].startswith("text/event-stream")
            payloads = events(chunks)
            assert payloads[-1] == "[DONE]"
            text = "".join(
                json.loads(p)["choices"][0]["delta"].get("content", "") for p in payloads[:-1]
            )
            assert text
            assert "echo these words back please".startswith(text)  # the sim echoes
            assert len(payloads) > 3
            # The same connection answers a plain request after the stream.
            post(sock, {**body, "max_tokens": 3}, f"plain-{round_}")
            status, _, (answer,) = reader.response()
            assert status == 200
            assert json.loads(answer)["choices"][0]["message"]["content"]


def test_a_client_that_stops_reading_pauses_its_worker_until_it_leaves(router: Router) -> None:
    # ~19 MB of events: far more than the socket buffers hold.
    body = {
        "messages": [{"role": "user", "content": "go"}],
        "stream": True,
        "n": 4,
        "max_tokens": 8000,
        "ignore_eos": True,
        "logprobs": True,
        "top_logprobs": 5,
    }
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        sock.connect(("127.0.0.1", router.port))
        post(sock, body, "stops-reading")
        # The worker's stream stops: the router holds no more than its buffers' worth.
        deadline = time.monotonic() + DEADLINE_S
        last, steady_since = -1, time.monotonic()
        while time.monotonic() - steady_since < 1.0:
            assert time.monotonic() < deadline, "the worker's stream never paused"
            time.sleep(0.1)
            now = generated_of(router, "stops-reading")
            if now != last:
                last, steady_since = now, time.monotonic()
        assert 0 < last < 4 * 8000
        assert outcome_of(router, "stops-reading") is None  # still running, paused
    # The client left without reading: the router aborts the request on its worker.
    router.wait_until(lambda: outcome_of(router, "stops-reading") in ("abort", "cancelled"))


def test_a_client_leaving_mid_stream_aborts_its_worker_request(router: Router) -> None:
    router.sims[0].knobs.update({"delay_ms": 20.0})
    body = {"messages": [{"role": "user", "content": "go"}], "stream": True}
    with socket.create_connection(("127.0.0.1", router.port)) as sock:
        post(sock, {**body, "max_tokens": 500, "ignore_eos": True}, "leaves")
        reader = Reader(sock)
        while reader.buffer.count(b"data: ") < 3:  # a few pieces went out
            reader._fill()
    # 500 tokens would take 10 s; the worker is told to stop as soon as the client left.
    router.wait_until(lambda: outcome_of(router, "leaves") in ("abort", "cancelled"))
    assert generated_of(router, "leaves") < 500
