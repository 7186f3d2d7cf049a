"""A real MCP server for the tests, built with the official ``mcp`` SDK and served over
streamable HTTP on a loopback port in a subprocess; and a hostile one that answers MCP
requests with what is not JSON-RPC.

``python -m tests.responses.mcp_server PORT FIXTURES [sse]`` runs the server (``stdio``
for ``PORT``: on stdin and stdout; ``sse``: the SSE transport): tools ``add(a, b)``,
``read_fixture(name)`` (a file of the fixtures directory), ``hang()`` (never answers),
``huge(size)`` (a text of ``size`` bytes) and ``whoami()`` (a digest of the ``authorization``
header it was called with).
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer

from tests.support import wait_for
from turnout.testing.router import free_port


def _serve(port: int | None, fixtures: Path, sse: bool = False) -> None:
    """Serve on ``port`` (streamable HTTP, or SSE), or on stdin and stdout (``port`` None)."""
    server = MCPServer("turnout-tests")

    @server.tool()
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    @server.tool()
    def read_fixture(name: str) -> str:
        """Read a fixture file by name."""
        path = (fixtures / name).resolve()
        if path.parent != fixtures.resolve() or not path.is_file():
            raise ValueError(f"no fixture named {name!r}")
        return path.read_text()

    @server.tool()
    async def hang() -> str:
        """Never answers."""
        await anyio.sleep(3600)
        return "late"

    @server.tool()
    def huge(size: int) -> str:
        """A text of ``size`` bytes."""
        return "x" * size

    @server.tool()
    def whoami(ctx: Context) -> str:  # type: ignore[type-arg]
        """Who the call's authorization header says the caller is (its digest: the header
        itself stays out of every log)."""
        return caller_digest((ctx.headers or {}).get("authorization", "nobody"))

    if port is None:
        server.run("stdio")
    elif sse:
        server.run("sse", host="127.0.0.1", port=port)
    else:
        server.run("streamable-http", host="127.0.0.1", port=port, stateless_http=True)


def caller_digest(authorization: str) -> str:
    """What ``whoami`` answers for an ``authorization`` header."""
    return "caller-" + hashlib.sha256(authorization.encode()).hexdigest()[:16]


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@contextlib.contextmanager
def mcp_server(fixtures: Path, *, sse: bool = False) -> Iterator[str]:
    """The URL of a running test MCP server (stopped at the end): streamable HTTP, or the
    SSE transport (``sse``)."""
    port = free_port()
    command = [sys.executable, "-m", "tests.responses.mcp_server", str(port), str(fixtures)]
    process = subprocess.Popen(
        [*command, *(["sse"] if sse else [])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _listening(port) or process.poll() is not None, "the MCP server")
        assert process.poll() is None, "the MCP server exited"
        yield f"http://127.0.0.1:{port}/{'sse' if sse else 'mcp'}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class _Garbage(BaseHTTPRequestHandler):
    """Answers every request with a 200 whose JSON body is not JSON-RPC."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        body = b'{"this is": not json-rpc'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_response(405)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextlib.contextmanager
def garbage_server() -> Iterator[str]:
    """The URL of an HTTP server that answers MCP with malformed JSON-RPC."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/mcp"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


if __name__ == "__main__":
    where, folder = sys.argv[1], Path(sys.argv[2])
    _serve(None if where == "stdio" else int(where), folder, sse=sys.argv[3:] == ["sse"])
