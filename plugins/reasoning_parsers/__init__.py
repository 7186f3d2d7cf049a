"""Built-in reasoning parsers, registered lazily."""

from __future__ import annotations

from turnout.hookspecs import Register, hookimpl

_PKG = "turnout.plugins.reasoning_parsers"

# (canonical name, "module:Class", aliases, model-name patterns, description)
BUILTIN_REASONING_PARSERS: tuple[
    tuple[str, str, tuple[str, ...], tuple[str, ...], str], ...
] = ()


@hookimpl
def turnout_register_reasoning_parsers(register: Register) -> None:
    """Register every built-in reasoning parser by its lazy import path."""
    for name, target, aliases, models, description in BUILTIN_REASONING_PARSERS:
        register(
            name, f"{_PKG}.{target}", aliases=aliases, models=models, description=description
        )
