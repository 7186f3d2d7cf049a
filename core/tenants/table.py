"""The configured tenants, resolved once per configuration (start-up and each reload)."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from turnout.config import Config, TenantConfig, key_digest


@dataclass(slots=True, eq=False)
class Tenant:
    """One tenant of one configuration (a reload makes new objects)."""

    name: str
    settings: TenantConfig
    #: Names each served model answers to (its id and aliases), for the model patterns.
    model_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    _allowed: dict[str, bool] = field(default_factory=dict)

    @property
    def priority(self) -> int:
        """Place in the admission queue (higher first)."""
        return self.settings.priority

    @property
    def limited(self) -> bool:
        """True when any of its limits is set."""
        return self.settings.limited

    def allows(self, model_id: str) -> bool:
        """True when the tenant may use ``model_id`` (matched by id or by an alias)."""
        allowed = self._allowed.get(model_id)
        if allowed is None:
            patterns = self.settings.models
            names = self.model_names.get(model_id, (model_id,))
            allowed = patterns is None or any(
                fnmatch.fnmatchcase(name, pattern) for pattern in patterns for name in names
            )
            if len(self._allowed) < 4096:  # model ids come from workers: bound the cache
                self._allowed[model_id] = allowed
        return allowed


class TenantTable:
    """Tenants by name and by key digest."""

    def __init__(self, tenants: Mapping[str, Tenant], keys: Mapping[bytes, Tenant]) -> None:
        self._tenants = dict(tenants)
        #: SHA-256 digest of each tenant key -> its tenant.
        self.keys = dict(keys)

    @classmethod
    def from_config(cls, config: Config) -> TenantTable:
        """The ``tenants`` section of ``config`` (aliases come from its ``models``)."""
        names: dict[str, tuple[str, ...]] = {
            model_id: (model_id, *model.aliases) for model_id, model in config.models.items()
        }
        tenants: dict[str, Tenant] = {}
        keys: dict[bytes, Tenant] = {}
        for name, settings in config.tenants.items():
            tenant = Tenant(name, settings, names)
            tenants[name] = tenant
            for key in settings.keys:
                keys[bytes.fromhex(key_digest(key))] = tenant
            for digest in settings.key_sha256:
                keys[bytes.fromhex(digest)] = tenant
        return cls(tenants, keys)

    def get(self, name: str) -> Tenant | None:
        """The tenant called ``name``."""
        return self._tenants.get(name)

    def __iter__(self) -> Iterator[Tenant]:
        return iter(self._tenants.values())

    def __len__(self) -> int:
        return len(self._tenants)

    @property
    def any_limited(self) -> bool:
        """True when some tenant has a limit (the limiter is needed)."""
        return any(tenant.limited for tenant in self._tenants.values())
