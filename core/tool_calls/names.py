"""Which function names a request offers, and whether a parsed call may be returned.

Project rule (every tool parser follows it): when the request carries a non-empty ``tools`` list,
a call whose name is not among the offered functions is not returned as a call; its raw text stays
in the normal text. Without tools (``None`` or an empty list) every well-formed call is returned.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from turnout.tool_calls.types import Tools


def _field(obj: Any, key: str) -> Any:
    if type(obj) is dict or isinstance(obj, Mapping):  # the ABC check alone is slow
        return obj.get(key)
    return getattr(obj, key, None)


def tool_names(tools: Tools) -> frozenset[str] | None:
    """Names of the functions in an OpenAI ``tools`` list; ``None`` means "do not filter".

    Accepts ``{"type": "function", "function": {"name": ...}}`` entries (mappings or objects with
    the same attributes) and the flat ``{"name": ...}`` shape. Entries without a usable name are
    ignored; if no entry has one the result is ``None`` (nothing to filter against).
    """
    if not tools:
        return None
    names: set[str] = set()
    for tool in tools:
        function = _field(tool, "function")
        name = _field(function, "name") if function is not None else _field(tool, "name")
        if isinstance(name, str) and name:
            names.add(name)
    return frozenset(names) if names else None


def is_allowed(name: str, names: frozenset[str] | None) -> bool:
    """True when a call to ``name`` may be returned (``names`` from :func:`tool_names`)."""
    return bool(name) and (names is None or name in names)
