"""Plain registries of plugin-provided factories: what requests use after start-up."""

from __future__ import annotations

import difflib
import fnmatch
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from turnout.errors import PluginError

T = TypeVar("T")


@dataclass(slots=True)
class PluginFailure:
    """An entry point that could not be imported."""

    distribution: str
    entry_point: str
    error: str


@dataclass(slots=True)
class Registration:
    """One name registered by a plugin."""

    name: str
    factory: object
    models: tuple[str, ...]
    aliases: tuple[str, ...]
    description: str
    distribution: str
    version: str
    _resolved: Callable[..., Any] | None = field(default=None, repr=False)

    def resolve(self) -> Callable[..., Any]:
        """Return the factory, importing a lazy ``"module:attr"`` string the first time."""
        if self._resolved is None:
            factory = self.factory
            if isinstance(factory, str):
                module_name, _, attr = factory.partition(":")
                try:
                    obj: Any = importlib.import_module(module_name)
                    for part in attr.split(".") if attr else ():
                        obj = getattr(obj, part)
                except Exception as exc:
                    raise PluginError(
                        f"{self.name!r} from {self.distribution} {self.version}: cannot import "
                        f"{factory!r}: {type(exc).__name__}: {exc}"
                    ) from exc
                factory = obj
            if not callable(factory):
                raise PluginError(
                    f"{self.name!r} from {self.distribution}: factory is not callable"
                )
            self._resolved = factory
        return self._resolved


class Registry(Generic[T]):
    """Named factories of one kind (tool parsers, reasoning parsers or policies)."""

    def __init__(self, kind: str, failures: Iterable[PluginFailure] = ()) -> None:
        self.kind = kind
        self._by_name: dict[str, Registration] = {}
        self._canonical: dict[str, Registration] = {}
        self._failures = list(failures)

    def add(self, registration: Registration) -> None:
        """Add a registration; a name or alias already taken is a start-up error naming both."""
        for key in (registration.name, *registration.aliases):
            other = self._by_name.get(key.lower())
            if other is not None and other is not registration:
                raise PluginError(
                    f"{self.kind} name {key!r} is registered twice: by "
                    f"{other.distribution} {other.version} (as {other.name!r}) and by "
                    f"{registration.distribution} {registration.version} (as "
                    f"{registration.name!r}); uninstall one of them or restrict plugins with "
                    "TURNOUT_PLUGINS"
                )
        for key in (registration.name, *registration.aliases):
            self._by_name[key.lower()] = registration
        self._canonical[registration.name] = registration

    def names(self) -> list[str]:
        """Canonical names, sorted."""
        return sorted(self._canonical)

    def registrations(self) -> list[Registration]:
        """All registrations, sorted by canonical name."""
        return [self._canonical[name] for name in self.names()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_name

    def get(self, name: str) -> Registration:
        """The registration for a name or alias; unknown names raise a helpful error."""
        try:
            return self._by_name[name.lower()]
        except KeyError:
            raise PluginError(self._unknown_message(name)) from None

    def canonical(self, name: str) -> str:
        """The canonical name for a name or alias."""
        return self.get(name).name

    def factory(self, name: str) -> Callable[..., T]:
        """The resolved factory for ``name``: look it up once, call it per request."""
        return self.get(name).resolve()

    def create(self, name: str, **params: Any) -> T:
        """A fresh instance of the plugin registered as ``name`` (or an alias)."""
        instance: T = self.factory(name)(**params)
        return instance

    def for_model(self, model_id: str) -> str | None:
        """Canonical name whose model pattern matches ``model_id`` (longest pattern wins)."""
        lowered = model_id.lower()
        best: tuple[int, str] | None = None
        for registration in self._canonical.values():
            for pattern in registration.models:
                if fnmatch.fnmatchcase(lowered, pattern.lower()) and (
                    best is None or len(pattern) > best[0]
                ):
                    best = (len(pattern), registration.name)
        return None if best is None else best[1]

    def _unknown_message(self, name: str) -> str:
        known = sorted(self._by_name)
        lines = [f"unknown {self.kind} {name!r}; valid names: {', '.join(self.names()) or 'none'}"]
        close = difflib.get_close_matches(name.lower(), known, n=1)
        if close:
            lines.append(f"did you mean {self._by_name[close[0]].name!r}?")
        for failure in self._failures:
            lines.append(
                f"plugin {failure.entry_point!r} from {failure.distribution} failed to import "
                f"and may provide it: {failure.error}"
            )
        if not self._failures:
            lines.append(
                f"if {name!r} comes from a plugin package, install it next to turnout "
                "(pip install <package>) and check `turnout plugins`"
            )
        return "\n".join(lines)
