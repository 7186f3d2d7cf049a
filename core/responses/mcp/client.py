"""Talking to one MCP server with the official ``mcp`` SDK: list its tools, call one.

Each operation opens its own session (streamable HTTP, or SSE for a URL ending in ``/sse``),
runs under one deadline (connect, handshake and the call) and closes it: no connection
outlives the step of the response that needed it. Connections go to the addresses that were
checked (:func:`~turnout.responses.mcp.servers.allowed_addresses`; TLS still verifies the
host name), and every answer of the server is read up to ``max_result_bytes``. Whatever goes
wrong becomes an :class:`McpFailure` carrying OpenAI's ``error`` object of the item: never a
5xx of the response. Headers are never logged: failures are described without them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import PaginatedRequestParams

from turnout.multimodal.addresses import IPAddress
from turnout.responses.mcp.servers import ListedTool, McpFailure, McpServer

log = logging.getLogger(__name__)

#: Where stdio servers' own messages go (the router's stderr, as the SDK's default).
_STDERR = sys.stderr
#: JSON-RPC's "parse error": the server's answer was not a JSON-RPC message.
_PARSE_ERROR = -32700


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context of every MCP connection, made once: loading the certificate
    authorities takes tens of milliseconds of the event loop."""
    return ssl.create_default_context()


class _TooLarge(Exception):
    """The server's answer passed the byte limit."""


@dataclass(slots=True)
class _Budget:
    """The bytes an operation may still read from the server (shared by its requests)."""

    left: int
    exceeded: bool = False


class _Counted(httpx2.AsyncByteStream):
    """A response body read within the operation's byte budget (:class:`_TooLarge` past it:
    the SDK may turn that into an error of its own, the budget remembers)."""

    def __init__(self, inner: httpx2.AsyncByteStream, budget: _Budget) -> None:
        self._inner = inner
        self._budget = budget

    async def __aiter__(self) -> AsyncIterator[bytes]:
        budget = self._budget
        async for chunk in self._inner:
            budget.left -= len(chunk)
            if budget.left < 0:
                budget.exceeded = True
                raise _TooLarge
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _PinnedTransport(httpx2.AsyncBaseTransport):
    """Connects to a checked address of the server's host (never to a second DNS answer),
    the host name still sent in ``Host`` and TLS's SNI, and bounds every body read."""

    def __init__(self, host: str, address: IPAddress, budget: _Budget) -> None:
        self._host = host
        self._address = str(address)
        self._budget = budget
        self._inner = httpx2.AsyncHTTPTransport(verify=_tls(), trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host != self._host:  # the SDK follows redirects on the origin only
            raise httpx2.ConnectError(f"redirect to another host ({request.url.host})")
        request.url = request.url.copy_with(host=self._address)
        request.extensions = {**request.extensions, "sni_hostname": self._host}
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _Counted(stream, self._budget)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@dataclass(frozen=True, slots=True)
class McpClient:
    """One server, at the addresses allowed for it, within the operator's bounds."""

    server: McpServer
    addresses: Sequence[IPAddress]
    timeout_s: float
    max_bytes: int

    def _factory(self, budget: _Budget) -> Callable[..., httpx2.AsyncClient]:
        """Makes HTTP clients to the server's checked address (the SSE client's factory)."""
        host = httpx2.URL(self.server.url).host

        def make(
            headers: Mapping[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                transport=_PinnedTransport(host, self.addresses[0], budget),
                headers=dict(headers if headers is not None else self.server.headers),
                timeout=timeout or httpx2.Timeout(self.timeout_s),
                auth=auth,
            )

        return make

    @contextlib.asynccontextmanager
    async def _session(self, budget: _Budget) -> AsyncIterator[ClientSession]:
        url = self.server.url
        make = self._factory(budget)
        async with contextlib.AsyncExitStack() as stack:
            if self.server.command:
                command, *args = self.server.command
                parameters = StdioServerParameters(
                    command=command, args=args, env=dict(self.server.env) or None
                )
                streams = stdio_client(parameters, errlog=_STDERR)
            elif url.rstrip("/").endswith("/sse"):
                headers = dict(self.server.headers)
                streams = sse_client(
                    url, headers=headers, timeout=self.timeout_s,
                    sse_read_timeout=self.timeout_s, httpx_client_factory=make,
                )  # fmt: skip
            else:
                http = await stack.enter_async_context(make())
                # The budget bounds every byte read (the SDK's own limit would hide why).
                streams = streamable_http_client(url, http_client=http, max_sse_event_size=None)
            read, write = await stack.enter_async_context(streams)
            session = await stack.enter_async_context(ClientSession(read, write))
            await session.initialize()
            yield session

    async def list_tools(self) -> list[ListedTool]:
        """The server's tools (one page after another, within the deadline)."""
        tools: list[ListedTool] = []
        budget = _Budget(self.max_bytes)
        try:
            with anyio.fail_after(self.timeout_s):
                async with self._session(budget) as session:
                    result = await session.list_tools()
                    tools.extend(_listed(tool) for tool in result.tools)
                    pages = 1
                    while result.next_cursor and pages < 16:
                        page = PaginatedRequestParams(cursor=result.next_cursor)
                        result = await session.list_tools(params=page)
                        tools.extend(_listed(tool) for tool in result.tools)
                        pages += 1
        except Exception as exc:
            raise _failure(exc, self, budget, "listing the tools") from None
        return tools

    async def call(self, name: str, arguments: str) -> str:
        """The output of a call of tool ``name`` (:class:`McpFailure` with the item's error
        when it fails)."""
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise McpFailure(
                {
                    "type": "mcp_protocol_error",
                    "code": -32602,
                    "message": "the model's arguments are not a JSON object",
                }
            )
        budget = _Budget(self.max_bytes)
        try:
            with anyio.fail_after(self.timeout_s):
                async with self._session(budget) as session:
                    result = await session.call_tool(name, parsed)
        except Exception as exc:
            raise _failure(exc, self, budget, f"calling {name!r}") from None
        content = [part.model_dump(mode="json", exclude_none=True) for part in result.content]
        if result.is_error:
            raise McpFailure({"type": "mcp_tool_execution_error", "content": content})
        output = _output_text(content, result.structured_content)
        if len(output.encode()) > self.max_bytes:
            raise McpFailure(_too_large(self.max_bytes))
        return output


def _listed(tool: Any) -> ListedTool:
    annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
    return ListedTool(tool.name, tool.description, dict(tool.input_schema), annotations)


def _output_text(content: list[dict[str, Any]], structured: object) -> str:
    """A call's output as the ``output`` string: its text parts joined (other parts as
    JSON), else its structured content."""
    texts = [part["text"] if part.get("type") == "text" else json.dumps(part) for part in content]
    if texts:
        return "\n".join(texts)
    return "" if structured is None else json.dumps(structured)


def _too_large(limit: int) -> dict[str, Any]:
    return {
        "type": "http_error",
        "code": 413,
        "message": f"the MCP server's answer is larger than {limit} bytes",
    }


def _failure(exc: BaseException, client: McpClient, budget: _Budget, doing: str) -> McpFailure:
    """The item's error for an operation that raised ``exc`` (nested task-group errors
    unwrapped)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    label = client.server.label
    if budget.exceeded or isinstance(exc, _TooLarge):
        return McpFailure(_too_large(client.max_bytes))
    if isinstance(exc, TimeoutError):
        message = f"MCP server {label!r} did not answer within {client.timeout_s:g}s ({doing})"
        return McpFailure({"type": "http_error", "code": 504, "message": message})
    if isinstance(exc, MCPError):
        code = exc.code
        message = f"MCP server {label!r}: {exc.error.message} ({doing})"
        return McpFailure({"type": "mcp_protocol_error", "code": code, "message": message})
    if isinstance(exc, httpx2.HTTPStatusError):
        status = exc.response.status_code
        message = f"MCP server {label!r} answered HTTP {status} ({doing})"
        return McpFailure({"type": "http_error", "code": status, "message": message})
    if isinstance(exc, (httpx2.TransportError, OSError)):
        message = f"MCP server {label!r} cannot be reached ({doing}): {type(exc).__name__}"
        return McpFailure({"type": "http_error", "code": 502, "message": message})
    log.info("MCP server %r failed %s: %s", label, doing, type(exc).__name__)
    message = f"MCP server {label!r} sent an answer that is not MCP ({doing})"
    return McpFailure({"type": "mcp_protocol_error", "code": _PARSE_ERROR, "message": message})
