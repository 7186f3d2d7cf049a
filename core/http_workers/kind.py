"""Which workers are HTTP workers (a leaf: the config checks and the worker layer ask it)."""

from __future__ import annotations

import re
from typing import Final, Protocol
from urllib.parse import urlsplit

from turnout.workers.roles import Role

#: URL schemes of OpenAI-compatible HTTP servers.
HTTP_SCHEMES: Final = ("http://", "https://")


class _Spec(Protocol):
    @property
    def url(self) -> str: ...

    @property
    def kind(self) -> str | None: ...


class _HttpSpec(_Spec, Protocol):
    @property
    def role(self) -> Role | None: ...

    @property
    def dp_size(self) -> int | None: ...

    @property
    def bootstrap_port(self) -> int | None: ...

    @property
    def api_key_env(self) -> str | None: ...

    @property
    def health_path(self) -> str: ...


def is_http_worker(spec: _Spec) -> bool:
    """Whether ``spec`` names an OpenAI-compatible HTTP server: ``kind: http``, or no kind and
    an ``http://``/``https://`` URL."""
    kind = spec.kind
    if kind is not None:
        return kind == "http"
    return spec.url.startswith(HTTP_SCHEMES)


def _port_ok(url: str) -> bool:
    try:
        urlsplit(url).port  # noqa: B018 - raises on a port that is not one
    except ValueError:
        return False
    return True


def http_worker_problem(spec: _HttpSpec) -> tuple[str, str] | None:
    """(field, why) when ``spec`` is no usable HTTP worker: it needs an
    ``http(s)://host[:port][/prefix]`` URL, is a regular worker (no prefill-decode, no DP
    ranks) and names its key by an environment variable."""
    if not re.fullmatch(r"https?://[^/\s?#]+(/[^\s?#]*)?", spec.url) or not _port_ok(spec.url):
        return "url", f"an HTTP worker needs http://host:port or https://host, got {spec.url!r}"
    if spec.role not in (None, Role.REGULAR):
        return "role", "an HTTP worker is a regular worker (no prefill-decode)"
    if spec.dp_size not in (None, 1):
        return "dp_size", "not for an HTTP worker (its server balances itself)"
    if spec.bootstrap_port is not None:
        return "bootstrap_port", "not for an HTTP worker (no prefill-decode)"
    name = spec.api_key_env
    if name is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return "api_key_env", f"the name of an environment variable, got {name!r}"
    if not spec.health_path.startswith("/"):
        return "health_path", f"a path starting with '/', got {spec.health_path!r}"
    return None
