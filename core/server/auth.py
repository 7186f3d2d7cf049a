"""API keys: which routes need which key, and a constant-time check of ``Authorization: Bearer``.

Route classes: *public* (probes, and ``/metrics`` unless configured otherwise), *admin*
(``/workers`` …: the admin key, or an untenanted serving key when no admin key is set) and
*serving* (everything else: a serving key, a tenant's key or the admin key). No keys configured
means open.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from turnout.config import ServerConfig
from turnout.errors import ApiError

if TYPE_CHECKING:
    from turnout.tenants.table import Tenant, TenantTable

PUBLIC_PATHS = frozenset({"/health", "/liveness", "/readiness"})
ADMIN_PREFIXES = ("/workers", "/admin")
#: Routes that run requests on workers (admission control and the request timeout apply).
GENERATION_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/generate",
        "/v1/embeddings",
    }
)


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


def credentials(authorization: bytes | None, api_key: bytes | None) -> str | None:
    """The ``Authorization`` header's value; else Anthropic's ``x-api-key`` as a bearer token
    (its clients send the key that way, tenant keys included)."""
    if authorization is not None:
        return authorization.decode("latin-1")
    if api_key is not None:
        return "Bearer " + api_key.decode("latin-1")
    return None


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyRing:
    """The configured keys, kept as SHA-256 digests and compared in constant time.

    A tenant's keys open serving routes only, and tell whose request it is; untenanted keys
    (``server.api_keys``) keep their old meaning, admin routes included when no admin key is
    set. Admin routes are open only when no key of any kind is configured.
    """

    def __init__(
        self,
        serving: Iterable[str],
        admin: str | None,
        tenant_keys: Mapping[bytes, Tenant] | None = None,
    ) -> None:
        untenanted: list[tuple[bytes, Tenant | None]] = [(_digest(k), None) for k in serving]
        self._admin = _digest(admin) if admin else None
        admin_entry = [(self._admin, None)] if self._admin is not None else []
        tenants = list((tenant_keys or {}).items())
        #: (digest, tenant) of every key a serving route takes.
        self._serving: list[tuple[bytes, Tenant | None]] = [*untenanted, *admin_entry, *tenants]
        #: Digests of the keys an admin route takes (empty: open, unless tenants have keys).
        self._admin_keys = [self._admin] if self._admin is not None else [d for d, _ in untenanted]
        self._closed_admin = not self._admin_keys and bool(tenants)

    @classmethod
    def from_config(cls, server: ServerConfig, tenants: TenantTable | None = None) -> KeyRing:
        """Keys of the ``server`` config section and of the tenants."""
        return cls(server.api_keys, server.admin_api_key, tenants.keys if tenants else None)

    @property
    def enabled(self) -> bool:
        """True when any key is configured."""
        return bool(self._serving)

    def admits_admin(self, authorization: str | None) -> bool:
        """True when ``authorization`` would open an admin route."""
        try:
            self.check(Access.ADMIN, authorization)
        except ApiError:
            return False
        return True

    def check(self, access: Access, authorization: str | None) -> Tenant | None:
        """The tenant of the key (None for an untenanted key, or no key needed); raises a 401
        :class:`ApiError` unless ``authorization`` grants ``access``."""
        if access is Access.PUBLIC:
            return None
        if access is Access.SERVING:
            if not self._serving:
                return None
        elif not self._admin_keys and not self._closed_admin:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(
                401,
                "missing API key: send 'Authorization: Bearer <key>' (or 'x-api-key: <key>')",
                code="invalid_api_key",
            )
        digest = _digest(token.strip())
        if access is Access.ADMIN:
            found = False
            for key in self._admin_keys:  # no early exit: the time does not tell which matched
                found |= hmac.compare_digest(digest, key)
            if not found:
                raise ApiError(401, "invalid admin API key", code="invalid_api_key")
            return None
        matched = False
        owner: Tenant | None = None
        for key, tenant in self._serving:
            if hmac.compare_digest(digest, key):
                matched, owner = True, tenant
        if not matched:
            raise ApiError(401, "invalid API key", code="invalid_api_key")
        return owner
