"""Find plugins through entry points, run their registration hooks once, build registries."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from turnout import hookspecs
from turnout.errors import PluginError
from turnout.plugin_kinds import (
    CHAT_FORMATS,
    DISCOVERY,
    PLUGIN_KINDS,
    POLICIES,
    REASONING_PARSERS,
    TOOL_PARSERS,
    PluginKind,
)
from turnout.plugin_registry import PluginFailure, Registration, Registry

if TYPE_CHECKING:
    from turnout.chat_formats.types import ChatFormat
    from turnout.discovery.types import DiscoveryProvider
    from turnout.reasoning.types import ReasoningParser
    from turnout.routing.types import Policy
    from turnout.tool_calls.types import ToolParser

T = TypeVar("T")

ENTRY_POINT_GROUP = "turnout.plugins"
#: Comma-separated allow-list of distribution or entry-point names; unset loads every plugin.
ALLOW_LIST_ENV = "TURNOUT_PLUGINS"


class PluginImportWarning(UserWarning):
    """A plugin's entry point failed to import; turnout goes on without it."""


@dataclass(slots=True)
class LoadedPlugin:
    """A plugin module that was registered, and where it came from."""

    name: str
    distribution: str
    version: str


@dataclass(slots=True)
class Plugins:
    """The registries built at start-up, one per kind of :data:`~turnout.plugin_kinds.PLUGIN_KINDS`;
    requests use these, never pluggy.

    ``plugins[TOOL_PARSERS]`` is a kind's registry, typed by its kind; the built-in kinds are
    also attributes (``plugins.tool_parsers``).
    """

    registries: dict[str, Registry[Any]]
    loaded: list[LoadedPlugin] = field(default_factory=list)
    failures: list[PluginFailure] = field(default_factory=list)

    def __getitem__(self, kind: PluginKind[T]) -> Registry[T]:
        registry: Registry[T] = self.registries[kind.key]
        return registry

    def registry(self, key: str) -> Registry[Any]:
        """The registry of a kind by its key (``"tool_parsers"``, ``"discovery"``, …)."""
        return self.registries[key]

    @property
    def tool_parsers(self) -> Registry[ToolParser]:
        """Tool-call parsers."""
        return self[TOOL_PARSERS]

    @property
    def reasoning_parsers(self) -> Registry[ReasoningParser]:
        """Reasoning parsers."""
        return self[REASONING_PARSERS]

    @property
    def policies(self) -> Registry[Policy]:
        """Worker selection policies."""
        return self[POLICIES]

    @property
    def discovery(self) -> Registry[DiscoveryProvider]:
        """Discovery providers."""
        return self[DISCOVERY]

    @property
    def chat_formats(self) -> Registry[ChatFormat]:
        """Chat formats (prompt rendering and output reading in one, e.g. harmony)."""
        return self[CHAT_FORMATS]


def _allow_list(allow: Iterable[str] | None) -> set[str] | None:
    if allow is not None:
        return {name.strip().lower() for name in allow}
    raw = os.environ.get(ALLOW_LIST_ENV)
    if raw is None or not raw.strip():
        return None
    return {name.strip().lower() for name in raw.split(",") if name.strip()}


def load_plugins(
    *,
    allow: Iterable[str] | None = None,
    extra: Iterable[tuple[object, str, str]] = (),
) -> Plugins:
    """Discover plugins by entry point and return plain registries.

    ``allow`` (or the ``TURNOUT_PLUGINS`` environment variable) restricts loading to the named
    distributions or entry points. ``extra`` adds in-process plugins as
    ``(module_or_object, distribution, version)`` — handy in tests.
    """
    allowed = _allow_list(allow)
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    origins: dict[str, LoadedPlugin] = {}
    failures: list[PluginFailure] = []

    for ep in sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = ep.dist
        dist_name = dist.metadata["Name"] if dist is not None else "<unknown>"
        version = dist.version if dist is not None else "?"
        if allowed is not None and not {ep.name.lower(), dist_name.lower()} & allowed:
            continue
        plugin_name = f"{dist_name}:{ep.name}"
        if plugin_name in origins:
            continue  # the same distribution seen twice on sys.path
        try:
            module = ep.load()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            failures.append(PluginFailure(dist_name, ep.name, error))
            warnings.warn(
                f"turnout plugin {ep.name!r} from {dist_name} {version} failed to import: {error}",
                PluginImportWarning,
                stacklevel=2,
            )
            continue
        pm.register(module, name=plugin_name)
        origins[plugin_name] = LoadedPlugin(plugin_name, dist_name, version)

    for index, (obj, dist_name, version) in enumerate(extra):
        plugin_name = f"{dist_name}:extra{index}"
        pm.register(obj, name=plugin_name)
        origins[plugin_name] = LoadedPlugin(plugin_name, dist_name, version)

    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        raise PluginError(f"a plugin implements an unknown hook: {exc}") from exc

    registries: dict[str, Registry[Any]] = {}
    for kind in PLUGIN_KINDS:
        registry: Registry[Any] = Registry(kind.label, failures)
        hook = getattr(pm.hook, kind.hook)
        # Each implementation is called on its own so every name is attributed to its distribution.
        for impl in reversed(hook.get_hookimpls()):
            origin = origins[impl.plugin_name]
            impl.function(register=_registrar(registry, origin))
        registries[kind.key] = registry

    return Plugins(registries, loaded=list(origins.values()), failures=failures)


def _registrar(registry: Registry[Any], origin: LoadedPlugin) -> hookspecs.Register[Any]:
    def register(
        name: str,
        factory: object,
        *,
        models: tuple[str, ...] | list[str] = (),
        aliases: tuple[str, ...] | list[str] = (),
        description: str = "",
    ) -> None:
        if not isinstance(name, str) or not name:
            raise PluginError(f"{origin.distribution}: a {registry.kind} needs a non-empty name")
        if not (callable(factory) or (isinstance(factory, str) and ":" in factory)):
            raise PluginError(
                f"{origin.distribution}: {registry.kind} {name!r} needs a callable factory or a "
                f"'module:attr' string, got {factory!r}"
            )
        registry.add(
            Registration(
                name=name,
                factory=factory,
                models=tuple(models),
                aliases=tuple(aliases),
                description=description,
                distribution=origin.distribution,
                version=origin.version,
            )
        )

    return register
