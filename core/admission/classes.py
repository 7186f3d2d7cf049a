"""A request's class and deadline from its headers, its class capped by its tenant."""

from __future__ import annotations

from turnout.admission.refusals import InvalidDeadline, InvalidPriority
from turnout.admission.settings import AdmissionSettings

PRIORITY_HEADER = b"x-turnout-priority"
DEADLINE_HEADER = b"x-turnout-ttft-deadline-ms"
#: Longest deadline a request may give (one hour).
MAX_DEADLINE_MS = 3_600_000


class ClassTable:
    """Class names to ranks (0: highest), the default class and the default cap."""

    def __init__(self, settings: AdmissionSettings) -> None:
        self.names = [cls.name for cls in settings.classes]
        self._ranks = {name: rank for rank, name in enumerate(self.names)}
        self.default = self._ranks[settings.default_class]
        self.cap = self._ranks[settings.max_class]

    def resolve(self, asked: bytes | None, tenant_cap: str | None) -> int:
        """The rank of a request that asked for ``asked`` (None: no header), at most as high
        as ``tenant_cap`` (None: the section's ``max_class``); 400 for an unknown name."""
        if asked is None:
            rank = self.default
        else:
            name = asked.decode("latin-1").strip().lower()
            found = self._ranks.get(name)
            if found is None:
                raise InvalidPriority(name[:64], self.names)
            rank = found
        cap = self._ranks.get(tenant_cap, self.cap) if tenant_cap is not None else self.cap
        return max(rank, cap)


def deadline_ms(given: bytes | None) -> int | None:
    """The ``x-turnout-ttft-deadline-ms`` value (None: none given); 400 when malformed."""
    if given is None:
        return None
    text = given.decode("latin-1").strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_DEADLINE_MS:
        raise InvalidDeadline(text[:32])
    return int(text)
