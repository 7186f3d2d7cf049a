"""API keys: which routes need which key, and a constant-time check of ``Authorization: Bearer``.

Route classes: *public* (probes, and ``/metrics`` unless configured otherwise), *admin*
(``/workers`` …: the admin key, or a serving key when no admin key is set) and *serving*
(everything else: a serving key or the admin key). No keys configured means open.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable

from turnout.config import ServerConfig
from turnout.server.errors import ApiError

PUBLIC_PATHS = frozenset({"/health", "/liveness", "/readiness"})
ADMIN_PREFIXES = ("/workers", "/admin")
#: Routes that generate (admission control and the request timeout apply to these).
GENERATION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions", "/generate"})


class Access(enum.Enum):
    """Who may call a route."""

    PUBLIC = "public"
    SERVING = "serving"
    ADMIN = "admin"


def access_of(path: str, metrics_public: bool = True) -> Access:
    """The access class of a request path."""
    if path in PUBLIC_PATHS or (metrics_public and path == "/metrics"):
        return Access.PUBLIC
    if path == "/metrics":
        return Access.ADMIN
    for prefix in ADMIN_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return Access.ADMIN
    return Access.SERVING


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyRing:
    """The configured keys, kept as SHA-256 digests and compared in constant time."""

    def __init__(self, serving: Iterable[str], admin: str | None) -> None:
        self._serving = [_digest(k) for k in serving]
        self._admin = _digest(admin) if admin else None

    @classmethod
    def from_config(cls, server: ServerConfig) -> KeyRing:
        """Keys of the ``server`` config section."""
        return cls(server.api_keys, server.admin_api_key)

    @property
    def enabled(self) -> bool:
        """True when any key is configured."""
        return bool(self._serving) or self._admin is not None

    def _matches(self, token: bytes, keys: list[bytes]) -> bool:
        found = False
        for key in keys:  # no early exit: the time does not tell which key matched
            found |= hmac.compare_digest(token, key)
        return found

    def check(self, access: Access, authorization: str | None) -> None:
        """Raise a 401 :class:`ApiError` unless ``authorization`` grants ``access``."""
        if access is Access.PUBLIC:
            return
        admin = [self._admin] if self._admin is not None else []
        keys = self._serving + admin if access is Access.SERVING else admin or self._serving
        if not keys:
            return
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401,
                "missing API key: send 'Authorization: Bearer <key>'",
                code="invalid_api_key",
            )
        if not self._matches(_digest(token.strip()), keys):
            kind = "admin API key" if access is Access.ADMIN else "API key"
            raise ApiError(401, f"invalid {kind}", code="invalid_api_key")
