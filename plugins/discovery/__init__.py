"""Built-in discovery providers, registered lazily."""

from __future__ import annotations

from turnout.hookspecs import DiscoveryRegister, hookimpl

_PKG = "turnout.plugins.discovery"

# (canonical name, "module:Class", aliases, description)
BUILTIN_DISCOVERY: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("file", "file:FileProvider", (), "workers listed in a YAML/JSON file, re-read on change"),
    (
        "kubernetes",
        "kubernetes:KubernetesProvider",
        ("k8s",),
        "Running and Ready pods of a namespace and label selector (turnout[kubernetes])",
    ),
)


@hookimpl
def turnout_register_discovery(register: DiscoveryRegister) -> None:
    """Register every built-in discovery provider by its lazy import path."""
    for name, target, aliases, description in BUILTIN_DISCOVERY:
        register(name, f"{_PKG}.{target}", aliases=aliases, description=description)
