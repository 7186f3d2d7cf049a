"""HTTP edges over real sockets: limits on a request head's size and number of fields (431), the
``Host`` field HTTP/1.1 requires once, boolean query parameters, and ``Allow`` on ``OPTIONS``."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.server.harness import Router, run_router

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def router() -> Iterator[Router]:
    """The router under the connection guard, with the default head limits."""
    with run_router(sims=1, guarded=True) as running:
        yield running


def exchange(port: int, head: bytes) -> tuple[bytes, dict[str, object] | None]:
    """Send ``head`` and read until the server closes or answers; the status line and the
    JSON body (None when not JSON)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status, _, rest = data.partition(b"\r\n")
    _, _, body = rest.partition(b"\r\n\r\n")
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None


def get(*fields: bytes, target: bytes = b"/health") -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\n" + b"".join(f + b"\r\n" for f in fields) + b"\r\n"


def code(body: dict[str, object] | None) -> object:
    assert isinstance(body, dict)
    error = body["error"]
    assert isinstance(error, dict)
    return error["code"]


def test_a_head_within_the_limits_is_served(router: Router) -> None:
    fields = [b"host: x", *(b"x-field-%d: %b" % (i, b"v" * 500) for i in range(95))]
    status, _ = exchange(router.port, get(*fields))
    assert status.startswith(b"HTTP/1.1 200 "), status


def test_a_header_line_over_the_limit_gets_431(
    router: Router, caplog: pytest.LogCaptureFixture
) -> None:
    status, body = exchange(router.port, get(b"host: x", b"x-big: " + b"v" * (16 * 1024)))
    assert status.startswith(b"HTTP/1.1 431 "), status
    assert code(body) == "header_too_large"
    assert "Invalid HTTP request" not in caplog.text  # not a parser error of uvicorn's


def test_a_malformed_head_still_gets_uvicorns_400(router: Router) -> None:
    status, _ = exchange(router.port, get(b"host: x", b"no colon here"))
    assert status.startswith(b"HTTP/1.1 400 "), status


def trickle(port: int, pieces: list[bytes]) -> bytes:
    """Send ``pieces`` a few milliseconds apart (each its own read on the router's side); what
    the router answered, once it closes (b"" if it reset the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            for piece in pieces:
                sock.sendall(piece)
                time.sleep(0.005)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
                if b"connection: close" in data:  # the router's 431 is all there is
                    break
        except (BrokenPipeError, ConnectionResetError):
            return b""
    return data


def test_a_head_within_the_limits_sent_a_line_at_a_time_is_served(router: Router) -> None:
    # 40 KiB in all, more than a line may hold, in many reads: only each line counts as one.
    lines = [b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"]
    lines += [b"x-field-%d: %b\r\n" % (i, b"v" * 1000) for i in range(40)]
    answer = trickle(router.port, [*lines, b"\r\n"])
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_a_head_within_the_limits_sent_in_pieces_across_its_lines_is_served(
    router: Router,
) -> None:
    # Each 20 KiB read holds the end of one 10 KiB line and the start of the next: the bytes
    # of a read are not all one line's.
    head = b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
    head += b"".join(b"x-field-%d: %b\r\n" % (i, b"v" * 10_000) for i in range(5)) + b"\r\n"
    pieces = [head[i : i + 20_000] for i in range(0, len(head), 20_000)]
    answer = trickle(router.port, pieces)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]


def test_a_header_line_trickled_in_small_pieces_is_refused_once_over_the_limit(
    router: Router,
) -> None:
    head = b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: "
    answer = trickle(router.port, [head, *[b"v" * 1024] * 64])
    assert answer.startswith(b"HTTP/1.1 431 ") or answer == b"", answer[:200]
    assert answer == b"" or b'"header_too_large"' in answer


def test_too_many_header_fields_get_431(router: Router) -> None:
    fields = [b"host: x", *(b"x-%d: 1" % i for i in range(5000))]
    status, body = exchange(router.port, get(*fields))
    assert status.startswith(b"HTTP/1.1 431 "), status
    assert code(body) == "too_many_headers"


def test_a_head_over_the_total_gets_431(router: Router) -> None:
    # Each line within its limit, under 100 fields, 90 KiB in all.
    fields = [b"host: x", *(b"x-field-%d: %b" % (i, b"v" * 3000) for i in range(30))]
    status, body = exchange(router.port, get(*fields))
    assert status.startswith(b"HTTP/1.1 431 "), status
    assert code(body) == "header_too_large"


def test_a_request_target_over_the_limit_gets_414(router: Router) -> None:
    status, body = exchange(router.port, get(b"host: x", target=b"/health?" + b"q" * 20000))
    assert status.startswith(b"HTTP/1.1 414 "), status
    assert code(body) == "uri_too_long"


def test_a_header_line_that_never_ends_is_refused_before_it_is_all_read(router: Router) -> None:
    # 32 MiB of one header value: the router answers and closes after a read or two, so
    # sending the rest fails long before it is all sent (without the limit, it reads it all).
    piece = b"v" * (64 * 1024)
    sent = 0
    with socket.create_connection(("127.0.0.1", router.port), timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: ")
        try:
            while sent < 32 * MIB:
                sock.sendall(piece)
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):  # the router closed it
            pass
    assert sent < 16 * MIB
    status, _ = exchange(router.port, get(b"host: x"))
    assert status.startswith(b"HTTP/1.1 200 "), status


@pytest.mark.parametrize(
    "fields",
    [(), (b"host: a", b"host: b")],
    ids=["no Host", "two Host fields"],
)
def test_a_request_without_one_host_gets_400(router: Router, fields: tuple[bytes, ...]) -> None:
    status, body = exchange(router.port, get(*fields))
    assert status.startswith(b"HTTP/1.1 400 "), status
    assert code(body) == "invalid_host"


def test_an_http_1_0_request_needs_no_host(router: Router) -> None:
    status, _ = exchange(router.port, b"GET /health HTTP/1.0\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200 "), status


@pytest.mark.parametrize("spelling", ["false", "0", "False"])
def test_a_boolean_query_parameter_takes_each_spelling(router: Router, spelling: str) -> None:
    # Reaches the lookup (404), not a 400 about `stream`.
    answer = httpx.get(f"{router.base_url}/v1/responses/resp_none?stream={spelling}", timeout=10)
    assert answer.status_code == 404, answer.text
    answer = httpx.delete(f"{router.base_url}/workers/none?wait={spelling}", timeout=10)
    assert answer.status_code == 404, answer.text


def test_a_boolean_query_parameter_refuses_other_words(router: Router) -> None:
    for url in ("/v1/responses/resp_none?stream=maybe", "/workers/none?wait=maybe"):
        method = "GET" if url.startswith("/v1") else "DELETE"
        answer = httpx.request(method, f"{router.base_url}{url}", timeout=10)
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == "invalid_value"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/v1/responses/resp_x", "DELETE, GET, OPTIONS"),
        ("/workers/w0", "DELETE, GET, OPTIONS"),
        ("/workers", "GET, OPTIONS, POST"),
        ("/v1/chat/completions", "OPTIONS, POST"),
    ],
)
def test_options_allows_every_method_of_the_path(router: Router, path: str, allowed: str) -> None:
    answer = httpx.options(f"{router.base_url}{path}", timeout=10)
    assert answer.status_code == 204, answer.text
    assert answer.headers["allow"] == allowed
