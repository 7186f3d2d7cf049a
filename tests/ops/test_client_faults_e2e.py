"""Clients that misbehave at the connection level, over real sockets: a client that stops
reading, idle and slow clients, and more connections than the process has descriptors for."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.harness import MODEL, Router, run_router
from turnout.server import connections
from turnout.sim import SimProcess

from .helpers import Serve, chat, scrape, value

CHAT = "/v1/chat/completions"


def raw_request(path: str, body: dict[str, object], port: int) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


def non_reader(port: int) -> socket.socket:
    """A connected socket with a tiny receive buffer, whose owner will never read it."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", port))
    return sock


@pytest.fixture(scope="module")
def one_slot() -> Iterator[Router]:
    server = {
        "max_concurrent_requests": 1,
        "queue_size": 4,
        "queue_timeout_s": 60,
        "request_timeout_s": 5.0,
    }
    with run_router(config={"server": server}, sims=1) as running:
        yield running


def test_request_timeout_frees_the_slot_of_a_client_that_does_not_read(one_slot: Router) -> None:
    # A long stream (kilobytes per token) to a client that reads nothing: within a second or
    # two the router's writes back up and the request waits on the socket until its timeout.
    stalled = non_reader(one_slot.port)
    try:
        long = chat(
            " ".join(["word"] * 40),
            stream=True,
            max_tokens=60000,
            ignore_eos=True,
            logprobs=True,
            top_logprobs=20,
        )
        stalled.sendall(raw_request(CHAT, long, one_slot.port))
        time.sleep(0.5)
        started = time.monotonic()
        answer = httpx.post(f"{one_slot.base_url}{CHAT}", json=chat(max_tokens=4), timeout=30)
        assert answer.status_code == 200, answer.text
        # It waited for the stalled request's timeout (5 s), not for the stalled client.
        assert time.monotonic() - started < 20
    finally:
        stalled.close()


# -- the connection guard of `turnout serve` ------------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    """A simulated worker without pacing: a stream fills socket buffers in a second or two."""
    with SimProcess("--served-model-name", MODEL) as running:
        yield running


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, sim: SimProcess) -> Iterator[Serve]:
    """``turnout serve`` with one-second connection deadlines."""
    server = Serve(
        tmp_path_factory.mktemp("strict"),
        sim.url,
        {
            "idle_timeout_s": 1,
            "header_timeout_s": 1,
            "body_timeout_s": 1,
            "send_timeout_s": 1,
            "request_timeout_s": 600,
        },
    )
    try:
        server.wait_ready()
        yield server
    finally:
        server.close()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def read_until_closed(sock: socket.socket, limit_s: float = 30.0) -> bytes:
    """Everything the server sends until it closes the connection (fails after ``limit_s``)."""
    sock.settimeout(limit_s)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_an_idle_connection_is_closed(strict: Serve) -> None:
    with connect(strict.port) as sock:
        started = time.monotonic()
        assert read_until_closed(sock) == b""  # closed without a word
        assert time.monotonic() - started >= 0.9


def test_a_connection_is_idle_again_after_its_request(strict: Serve) -> None:
    with connect(strict.port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_the_idle_timeout_counts_from_the_last_request(strict: Serve) -> None:
    # The idle timer is re-armed lazily: the one due 1 s after connecting must not close a
    # connection that answered a request since (it runs, then waits for the new deadline).
    with connect(strict.port) as sock:
        time.sleep(0.6)
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        sock.settimeout(30)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        answered = time.monotonic()
        read_until_closed(sock)
        assert time.monotonic() - answered >= 0.9


def test_slow_request_headers_get_408_and_the_connection_closes(strict: Serve) -> None:
    with connect(strict.port) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        closed = []
        for _ in range(40):  # one header byte every 0.1 s: never complete within 1 s
            try:
                sock.sendall(b"x")
            except OSError:
                closed.append(True)
                break
            time.sleep(0.1)
        answer = read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    assert json.loads(body)["error"]["code"] == "request_header_timeout"


def test_a_slow_request_body_gets_408_and_the_connection_closes(strict: Serve) -> None:
    with connect(strict.port) as sock:
        request = raw_request(CHAT, chat(), strict.port)
        sock.sendall(request[:-10])  # headers and most of the body; the rest never comes
        started = time.monotonic()
        answer = read_until_closed(sock)
    assert time.monotonic() - started >= 0.9
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer
    assert b"connection: close" in head.lower()
    assert b'"request_body_timeout"' in body


def test_a_client_that_stops_reading_is_disconnected_and_its_request_aborted(
    strict: Serve, sim: SimProcess
) -> None:
    stalled = non_reader(strict.port)
    try:
        long = chat(
            " ".join(["word"] * 40),
            stream=True,
            max_tokens=60000,
            ignore_eos=True,
            logprobs=True,
            top_logprobs=20,
        )
        stalled.sendall(raw_request(CHAT, long, strict.port))
        deadline = time.monotonic() + 10
        while value(scrape(strict.base_url), "turnout_requests_in_flight", route=CHAT) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # Without the guard it would wait on the socket for the whole request timeout (600 s).
        deadline = time.monotonic() + 60
        while value(scrape(strict.base_url), "turnout_requests_in_flight", route=CHAT) > 0:
            assert time.monotonic() < deadline, strict.log.read_text()[-3000:]
            time.sleep(0.2)
        with pytest.raises(ConnectionResetError):  # reset: what was unread is dropped
            read_until_closed(stalled)
    finally:
        stalled.close()
    assert "read nothing of its response" in strict.log.read_text()


def test_more_idle_connections_than_descriptors_do_not_lock_others_out(
    tmp_path: Path, sim: SimProcess
) -> None:
    # One client holds more idle sockets than the router has descriptors for (256): the
    # oldest idle ones are closed to make room, so other clients still get answers.
    server = Serve(tmp_path, sim.url, fd_limit=256)
    idle: list[socket.socket] = []
    try:
        server.wait_ready()
        for _ in range(300):
            idle.append(connect(server.port))
        answer = httpx.post(f"{server.base_url}{CHAT}", json=chat(max_tokens=4), timeout=30)
        assert answer.status_code == 200, answer.text
        assert httpx.get(f"{server.base_url}/readiness", timeout=30).status_code == 200
        # The oldest idle sockets were closed by the router (EOF), not the newest.
        evicted: set[socket.socket] = set()
        deadline = time.monotonic() + 20
        while len(evicted) < 50:
            assert time.monotonic() < deadline, len(evicted)
            readable, _, _ = select.select([s for s in idle if s not in evicted], [], [], 1)
            for sock in readable:
                assert sock.recv(1) == b""
                evicted.add(sock)
        assert all(idle.index(sock) < 150 for sock in evicted)
    finally:
        for sock in idle:
            sock.close()
        server.close()


@pytest.fixture(scope="module")
def capped() -> Iterator[Router]:
    """The router in this process under the connection guard, at most two connections."""
    with run_router(config={"server": {"max_connections": 2}}, sims=1, guarded=True) as running:
        yield running


def busy_connection(router: Router) -> socket.socket:
    """A connection carrying a request in progress: its body is still coming (for 60 s)."""
    sock = connect(router.port)
    sock.sendall(raw_request(CHAT, chat(), router.port)[:-10])
    return sock


def wait_until_served(router: Router) -> None:
    """Until a new connection is served again (the test's connections are gone)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{router.base_url}/health", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_a_busy_connection_is_never_evicted_at_the_cap(capped: Router) -> None:
    wait_until_served(capped)
    busy = [busy_connection(capped) for _ in range(2)]
    try:
        time.sleep(0.3)  # both requests started
        with connect(capped.port) as extra:  # answered at once (no request to wait for)
            assert select.select([extra], [], [], 5)[0], "a busy connection was evicted"
            answer = read_until_closed(extra)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 "), answer
        assert json.loads(body)["error"]["code"] == "connection_limit"
        for sock in busy:  # still open: nothing came from the router
            assert not select.select([sock], [], [], 0)[0]
    finally:
        for sock in busy:
            sock.close()


def test_at_the_cap_the_idle_connection_goes_and_the_busy_one_stays(capped: Router) -> None:
    wait_until_served(capped)
    busy = busy_connection(capped)
    idle = connect(capped.port)
    try:
        time.sleep(0.3)
        with connect(capped.port) as extra:
            extra.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            assert read_until_closed(extra).startswith(b"HTTP/1.1 200 ")
        assert read_until_closed(idle, 10) == b""  # closed to make room
        assert not select.select([busy], [], [], 0)[0]
    finally:
        busy.close()
        idle.close()


@pytest.mark.slow  # a server of its own
def test_at_the_cap_with_every_connection_busy_a_new_one_gets_503(
    tmp_path: Path, sim: SimProcess
) -> None:
    server = Serve(tmp_path, sim.url, {"max_connections": 2})
    try:
        server.wait_ready()
        busy = [connect(server.port) for _ in range(2)]
        for sock in busy:  # a request in progress: its body is still coming (for 60 s)
            sock.sendall(raw_request(CHAT, chat(), server.port)[:-10])
        time.sleep(0.5)
        with connect(server.port) as extra:
            answer = read_until_closed(extra)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 "), answer
        assert json.loads(body)["error"]["code"] == "connection_limit"
        for sock in busy:
            sock.close()
        # Once they are gone, new connections are served again.
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{server.base_url}/health", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        server.close()


def test_the_default_cap_leaves_descriptors_for_workers_and_files(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(connections, "fd_limit", lambda: 1024)
    assert connections.resolve_max_connections(0) == 1024 - 102
    monkeypatch.setattr(connections, "fd_limit", lambda: 256)
    assert connections.resolve_max_connections(0) == 256 - 64
    assert connections.resolve_max_connections(100) == 100
    assert not caplog.records
    assert connections.resolve_max_connections(250) == 250
    assert "file-descriptor limit" in caplog.text
    monkeypatch.setattr(connections, "fd_limit", lambda: None)
    assert connections.resolve_max_connections(0) == 0  # no limit, no cap
