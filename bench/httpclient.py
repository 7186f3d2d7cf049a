"""A minimal keep-alive HTTP/1.1 client for the load generator.

General clients (httpx, openai) spend more CPU per request than the routers under test; on a
2-core machine that CPU comes out of the router's share. This one does only what the benchmark
needs: POST/GET with a JSON body on one persistent connection, bodies framed by
``Content-Length``, ``Transfer-Encoding: chunked`` or end of connection, handed over as raw
pieces as they arrive (for SSE).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Self

__all__ = ["HttpConnection", "HttpError", "Response"]

_MAX_HEADER_LINES = 200


class HttpError(Exception):
    """The server broke the protocol or closed the connection mid-response."""


class Response:
    """Status, headers and a body read piece by piece; read the body fully before reuse."""

    def __init__(
        self, conn: HttpConnection, status: int, headers: dict[str, str], head_request: bool
    ) -> None:
        self._conn = conn
        self.status = status
        self.headers = headers
        self._done = head_request or status in (204, 304) or 100 <= status < 200
        self._keep_alive = headers.get("connection", "").lower() != "close"

    async def iter_body(self) -> AsyncIterator[bytes]:
        """Yield the body in the pieces the server framed it in (chunks for chunked bodies)."""
        if self._done:
            return
        reader = self._conn._reader_or_fail()
        try:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size_line = await reader.readline()
                    if not size_line.endswith(b"\n"):
                        raise HttpError("connection closed inside a chunked body")
                    size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while (await reader.readline()).strip():  # trailers
                            pass
                        break
                    piece = await reader.readexactly(size + 2)
                    yield piece[:-2]
            elif "content-length" in self.headers:
                left = int(self.headers["content-length"])
                while left > 0:
                    piece = await reader.read(min(left, 1 << 16))
                    if not piece:
                        raise HttpError("connection closed before the body was complete")
                    left -= len(piece)
                    yield piece
            else:
                self._keep_alive = False
                while piece := await reader.read(1 << 16):
                    yield piece
        except (asyncio.IncompleteReadError, ValueError) as exc:
            self._conn.close()
            raise HttpError(f"malformed or truncated body: {exc}") from None
        except BaseException:
            self._conn.close()  # a half-read body leaves the connection unusable
            raise
        self._done = True
        if not self._keep_alive:
            self._conn.close()

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([piece async for piece in self.iter_body()])


class HttpConnection:
    """One persistent connection to ``host:port``; reconnects on the next request if closed."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 10.0) -> None:
        self.host = host
        self.port = port
        self.connect_timeout = connect_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    def _reader_or_fail(self) -> asyncio.StreamReader:
        if self._reader is None:
            raise HttpError("connection is closed")
        return self._reader

    async def _connect(self) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port, limit=1 << 20), self.connect_timeout
        )

    def close(self) -> None:
        """Drop the connection (the next request opens a new one)."""
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> Response:
        """Send a request and read the status line and headers."""
        if self._writer is None or self._writer.is_closing():
            try:
                await self._connect()
            except (OSError, TimeoutError) as exc:
                raise HttpError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from None
        assert self._writer is not None
        lines = [
            f"{method} {path} HTTP/1.1",
            f"host: {self.host}:{self.port}",
            f"content-length: {len(body)}",
        ]
        if body:
            lines.append("content-type: application/json")
        lines.extend(f"{key}: {value}" for key, value in (headers or {}).items())
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            self._writer.write(head + body)
            return await self._read_head(method == "HEAD")
        except (OSError, asyncio.IncompleteReadError) as exc:
            self.close()
            raise HttpError(f"request failed: {exc!r}") from None
        except BaseException:
            self.close()
            raise

    async def _read_head(self, head_request: bool) -> Response:
        reader = self._reader_or_fail()
        status_line = await reader.readline()
        if not status_line:
            raise HttpError("server closed the connection before answering")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise HttpError(f"bad status line {status_line[:80]!r}")
        headers: dict[str, str] = {}
        for _ in range(_MAX_HEADER_LINES):
            line = await reader.readline()
            if line in (b"\r\n", b"\n"):
                return Response(self, int(parts[1]), headers, head_request)
            if not line:
                raise HttpError("connection closed inside the response headers")
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        raise HttpError("too many response header lines")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
