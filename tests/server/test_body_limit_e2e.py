"""The body limit at its edge, over raw sockets: a body of exactly ``max_body_bytes`` is served and
one byte more is a 413, with Content-Length and with chunked transfer, on a generation route
(the gate's own check) and on another route (Litestar's); past the limit, reading stops."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from .harness import MODEL, Router, run_router

LIMIT = 2000
ROUTES = {
    "/v1/chat/completions": {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
    },
    "/v1/tokenize": {"model": MODEL, "prompt": "hello"},
}


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    server = {"max_body_bytes": LIMIT, "request_timeout_s": 5}
    with run_router({"server": server}, sims=1) as running:
        yield running


def padded(payload: dict[str, object], size: int) -> bytes:
    """``payload`` as JSON, padded with trailing whitespace to exactly ``size`` bytes."""
    body = json.dumps(payload).encode()
    assert len(body) < size
    return body + b" " * (size - len(body))


def send(
    router: Router,
    path: str,
    body: bytes,
    *,
    chunked: bool,
    declared: int | None = None,
    finish: bool = True,
) -> tuple[int, bytes]:
    """POST ``body`` (in 500-byte chunks when ``chunked``) and return the status and body of the
    answer. ``declared`` overrides Content-Length; ``finish=False`` leaves the body unfinished
    (the answer must come without the rest)."""
    with socket.create_connection(("127.0.0.1", router.port), timeout=10) as sock:
        framing = (
            "Transfer-Encoding: chunked"
            if chunked
            else f"Content-Length: {len(body) if declared is None else declared}"
        )
        head = f"POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        head = f"{head}{framing}\r\nConnection: close\r\n\r\n"
        if not chunked:
            # Head and body in one write: a server that refuses on the head alone closes with
            # nothing unread, so the kernel sends no reset that could discard its answer.
            sock.sendall(head.encode() + body)
            body = b""
        else:
            sock.sendall(head.encode())
        try:
            for start in range(0, len(body), 500):
                piece = body[start : start + 500]
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked and finish:
                time.sleep(0.2)  # the end of the body on its own: a reader must wait for it
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before reading it all
        answer = b""
        while data := sock.recv(65536):  # to the end (Connection: close); a timeout fails
            answer += data
        head, _, content = answer.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), content


@pytest.mark.parametrize("path", sorted(ROUTES))
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_of_exactly_the_limit_is_served(router: Router, path: str, chunked: bool) -> None:
    status, body = send(router, path, padded(ROUTES[path], LIMIT), chunked=chunked)
    assert status == 200, body


@pytest.mark.parametrize("path", sorted(ROUTES))
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_one_byte_over_the_limit_is_a_413(router: Router, path: str, chunked: bool) -> None:
    status, body = send(router, path, padded(ROUTES[path], LIMIT + 1), chunked=chunked)
    assert status == 413, body
    error = json.loads(body)["error"]
    assert error["code"] == "request_too_large"
    assert f"limit of {LIMIT} bytes" in error["message"]


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_a_declared_oversized_body_is_refused_before_it_is_sent(router: Router, path: str) -> None:
    """Content-Length one byte over the limit and no body at all: the 413 comes at once."""
    status, _ = send(router, path, b"", chunked=False, declared=LIMIT + 1)
    assert status == 413


@pytest.mark.parametrize("path", sorted(ROUTES))
def test_reading_a_chunked_body_stops_at_the_limit(router: Router, path: str) -> None:
    """One byte past the limit, with the body left unfinished: the router answers 413 without
    waiting for the rest (it stopped reading)."""
    status, _ = send(router, path, padded(ROUTES[path], LIMIT + 1), chunked=True, finish=False)
    assert status == 413
