"""The ``mcp`` tools of a request: checked, and the servers they name, each allowed by the
operator's ``mcp`` section before anything connects to it.

A tool reads ``{"type": "mcp", "server_label", "server_url", "headers", "authorization",
"allowed_tools", "require_approval"}``. Its headers (tokens) are kept out of ``repr`` and of
everything echoed or stored: the response's ``tools`` carry ``headers: null``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from turnout.config import McpConfig
from turnout.errors import ApiError, bad_request
from turnout.generation.unsupported import unsupported
from turnout.multimodal.addresses import IPAddress, host_allowed, is_public_address, resolve_public
from turnout.multimodal.errors import ImageFetchFailed, ImageNotAllowed
from turnout.tenants import current_tenant

_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
#: MCP tool fields turnout does not serve → why.
_REFUSED = {
    "connector_id": "OpenAI's service connectors are OpenAI's: name a server_url",
    "tunnel_id": "OpenAI's MCP tunnels are OpenAI's: name a server_url",
    "defer_loading": "tool search is not supported: the server's tools are listed up front",
    "allowed_callers": "only the model calls MCP tools",
}
_KNOWN = frozenset(
    {
        "type",
        "server_label",
        "server_url",
        "server_description",
        "headers",
        "authorization",
        "allowed_tools",
        "require_approval",
        *_REFUSED,
    }
)


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """OpenAI's tool filter: tool names, and/or the tools annotated read-only."""

    names: frozenset[str] | None = None
    read_only: bool | None = None

    def matches(self, name: str, annotations: Mapping[str, Any] | None) -> bool:
        """Whether the filter takes tool ``name`` (with the server's ``annotations``)."""
        if self.names is not None and name not in self.names:
            return False
        if self.read_only is not None:
            read_only = bool((annotations or {}).get("readOnlyHint", False))
            return read_only == self.read_only
        return self.names is not None


@dataclass(frozen=True, slots=True)
class McpServer:
    """One MCP server a request names."""

    label: str
    #: Its URL; empty for a server of the operator's that the request names by label only.
    url: str
    #: Sent with every request to the server; never logged, echoed or stored.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The tools the model may see (None: all of them).
    allowed: ToolFilter | None = None
    #: ``"always"``, ``"never"``, or the filters of the tools that need (or do not need) it;
    #: None: the request did not say (the operator's setting, else OpenAI's ``always``).
    approval: str | tuple[ToolFilter | None, ToolFilter | None] | None = None
    #: A stdio server of the operator's: the command and its arguments, its environment.
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The tools the operator lets requests see (None: all of them).
    operator_allowed: frozenset[str] | None = None

    def allows(self, name: str, annotations: Mapping[str, Any] | None) -> bool:
        """Whether the model may see tool ``name``."""
        if self.operator_allowed is not None and name not in self.operator_allowed:
            return False
        return self.allowed is None or self.allowed.matches(name, annotations)

    def needs_approval(self, name: str, annotations: Mapping[str, Any] | None) -> bool:
        """Whether a call of ``name`` waits for the client's approval (OpenAI's default:
        every call does)."""
        if self.approval is None or isinstance(self.approval, str):
            return self.approval != "never"
        always, never = self.approval
        if always is not None and always.matches(name, annotations):
            return True
        return not (never is not None and never.matches(name, annotations))


class McpFailure(Exception):
    """An MCP operation failed: ``error`` is the item's ``error`` (OpenAI's shapes), or its
    message for ``mcp_list_tools``."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message") or "the MCP tool failed")
        self.error = error


@dataclass(frozen=True, slots=True)
class ListedTool:
    """A tool of a server: what ``mcp_list_tools`` lists and the model sees."""

    name: str
    description: str | None
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None

    def item(self) -> dict[str, Any]:
        """The tool as ``mcp_list_tools`` lists it."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }


def is_mcp(tool: Mapping[str, Any]) -> bool:
    """Whether a request's tool is an MCP server."""
    return tool.get("type") == "mcp"


def check_mcp_tool(tool: Mapping[str, Any], where: str) -> McpServer:
    """The server a request's ``mcp`` tool names (400s naming ``where``'s fields)."""
    for name, why in _REFUSED.items():
        if tool.get(name) not in (None, False):
            raise unsupported(f"{where}.{name}", f"{where}.{name} is not supported: {why}")
    extra = sorted(set(tool) - _KNOWN)
    if extra:
        raise bad_request(f"{where} has unknown fields: {', '.join(extra)}", f"{where}.{extra[0]}")
    label = tool.get("server_label")
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise bad_request(
            f"{where}.server_label must start with a letter and hold letters, digits, '-' and "
            "'_' (at most 64)",
            f"{where}.server_label",
        )
    url = tool.get("server_url")
    if url is None:  # a server of the operator's, named by its label
        return McpServer(
            label,
            "",
            _headers(tool, where),
            _allowed(tool.get("allowed_tools"), f"{where}.allowed_tools"),
            _approval(tool.get("require_approval"), f"{where}.require_approval"),
        )
    if not isinstance(url, str) or not url:
        raise bad_request(f"{where}.server_url must be a URL", f"{where}.server_url")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise bad_request(f"{where}.server_url must be an http or https URL", f"{where}.server_url")
    if parts.username is not None or parts.password is not None:
        raise bad_request(
            f"{where}.server_url must not hold credentials: send them in headers",
            f"{where}.server_url",
        )
    headers = _headers(tool, where)
    return McpServer(
        label,
        url,
        headers,
        _allowed(tool.get("allowed_tools"), f"{where}.allowed_tools"),
        _approval(tool.get("require_approval"), f"{where}.require_approval"),
    )


def request_servers(tools: Sequence[Mapping[str, Any]]) -> list[McpServer]:
    """The MCP servers of a request's tools (each label once)."""
    servers: list[McpServer] = []
    for i, tool in enumerate(tools):
        if not is_mcp(tool):
            continue
        server = check_mcp_tool(tool, f"tools[{i}]")
        if any(known.label == server.label for known in servers):
            raise bad_request(
                f"tools[{i}].server_label {server.label!r} names a second server",
                f"tools[{i}].server_label",
            )
        servers.append(server)
    return servers


def _headers(tool: Mapping[str, Any], where: str) -> dict[str, str]:
    raw = tool.get("headers")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise bad_request(f"{where}.headers must map names to strings", f"{where}.headers")
    headers = dict(raw)
    token = tool.get("authorization")
    if token is not None:
        if not isinstance(token, str) or not token:
            raise bad_request(
                f"{where}.authorization must be a non-empty string", f"{where}.authorization"
            )
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _filter(value: object, where: str) -> ToolFilter:
    if isinstance(value, list):
        if not all(isinstance(name, str) for name in value):
            raise bad_request(f"{where} must list tool names", where)
        return ToolFilter(frozenset(value))
    if not isinstance(value, dict) or set(value) - {"tool_names", "read_only"}:
        raise bad_request(f"{where} must be a list of tool names or a tool filter", where)
    names = value.get("tool_names")
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) for n in names)
    ):
        raise bad_request(f"{where}.tool_names must list tool names", f"{where}.tool_names")
    read_only = value.get("read_only")
    if read_only is not None and not isinstance(read_only, bool):
        raise bad_request(f"{where}.read_only must be a boolean", f"{where}.read_only")
    return ToolFilter(None if names is None else frozenset(names), read_only)


def _allowed(value: object, where: str) -> ToolFilter | None:
    return None if value is None else _filter(value, where)


def _approval(
    value: object, where: str
) -> str | tuple[ToolFilter | None, ToolFilter | None] | None:
    if value is None:
        return None
    if value in ("always", "never"):
        return str(value)
    if not isinstance(value, dict) or set(value) - {"always", "never"}:
        raise bad_request(f"{where} must be 'always', 'never' or {{always, never}} filters", where)
    always, never = value.get("always"), value.get("never")
    return (
        None if always is None else _filter(always, f"{where}.always"),
        None if never is None else _filter(never, f"{where}.never"),
    )


def _not_allowed(message: str, param: str) -> ApiError:
    return ApiError(400, message, param=param, code="mcp_server_not_allowed")


def operator_server(server: McpServer, config: McpConfig, model_id: str, where: str) -> McpServer:
    """A server of the operator's that a request names by label, with what the operator
    configured (a 400 ``mcp_server_not_found`` when there is none for this model and the
    request's tenant)."""
    found = config.servers.get(server.label)
    tenant = current_tenant()
    if (
        found is None
        or (found.models is not None and model_id not in found.models)
        or (found.tenants is not None and (tenant is None or tenant.name not in found.tenants))
    ):
        raise ApiError(
            400,
            f"no MCP server {server.label!r} is configured for model {model_id!r} and this "
            "API key: name a server_url, or a label of the operator's mcp.servers",
            param=f"{where}.server_label",
            code="mcp_server_not_found",
        )
    approval = server.approval if server.approval is not None else found.require_approval
    return McpServer(
        server.label,
        found.url or "",
        {**server.headers, **found.headers},
        server.allowed,
        approval,
        tuple(found.command or ()),
        dict(found.env),
        None if found.allowed_tools is None else frozenset(found.allowed_tools),
    )


async def allowed_addresses(
    server: McpServer, config: McpConfig, param: str, *, operator: bool = False
) -> list[IPAddress]:
    """The addresses the router may connect to for ``server`` (a 400
    ``mcp_server_not_allowed`` unless its host is one the operator lists and, unless the
    operator allows private addresses, every address it resolves to is public; a server
    of the operator's, ``operator``, may be anywhere). The caller connects to these
    addresses only: a second DNS answer is never used."""
    if server.command:
        return []
    parts = urlsplit(server.url)
    host = parts.hostname or ""
    if not operator and not host_allowed(host, config.allowed_hosts):
        raise _not_allowed(
            f"MCP server host {host!r} is not allowed: the operator lists the hosts MCP "
            "servers may be on (mcp.allowed_hosts)",
            param,
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    anywhere = operator or config.allow_private_addresses
    accept = _any_address if anywhere else is_public_address
    try:
        return await resolve_public(host, port, accept=accept)
    except ImageNotAllowed:
        raise _not_allowed(
            f"MCP server host {host!r} resolves to a private, loopback or reserved address "
            "(the operator may allow them: mcp.allow_private_addresses)",
            param,
        ) from None
    except ImageFetchFailed:
        raise ApiError(
            400,
            f"MCP server host {host!r} cannot be resolved",
            param=param,
            code="mcp_server_unresolvable",
        ) from None


def _any_address(address: IPAddress) -> bool:
    return not address.is_unspecified and not address.is_multicast


def echoed_mcp_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """An ``mcp`` tool as the response echoes (and keeps) it: without its headers and
    authorization."""
    echoed = {
        key: tool.get(key)
        for key in ("server_label", "server_url", "allowed_tools", "require_approval")
    }
    if tool.get("server_description") is not None:
        echoed["server_description"] = tool["server_description"]
    return {"type": "mcp", **echoed, "headers": None}
