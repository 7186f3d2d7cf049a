"""The kinds of plugin turnout loads: one row each.

A row names the kind's registration hook (a spec in :mod:`turnout.hookspecs`), the key of its
registry (``plugins[TOOL_PARSERS]``, ``plugins.tool_parsers``, the ``turnout plugins --json``
field) and how messages and ``turnout plugins`` call one of them. The loader, the registries and
the report read this table; a new kind is a new row (and its hookspec).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from turnout.chat_formats.types import ChatFormat
    from turnout.discovery.types import DiscoveryProvider
    from turnout.reasoning.types import ReasoningParser
    from turnout.routing.types import Policy
    from turnout.tool_calls.types import ToolParser

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PluginKind(Generic[T]):
    """One kind of plugin; ``T`` is what its factories make."""

    #: Registry key: ``Plugins`` attribute and ``turnout plugins --json`` field.
    key: str
    #: The registration hook plugins implement (``turnout_register_<key>``).
    hook: str
    #: One of them, in messages: ``unknown tool parser 'x'``.
    label: str
    #: One of them, in the ``turnout plugins`` listing (16 columns); the label when empty.
    column: str = ""

    @property
    def listing_label(self) -> str:
        """How ``turnout plugins`` labels a registration of this kind."""
        return self.column or self.label


TOOL_PARSERS: PluginKind[ToolParser] = PluginKind(
    "tool_parsers", "turnout_register_tool_parsers", "tool parser"
)
REASONING_PARSERS: PluginKind[ReasoningParser] = PluginKind(
    "reasoning_parsers", "turnout_register_reasoning_parsers", "reasoning parser"
)
POLICIES: PluginKind[Policy] = PluginKind("policies", "turnout_register_policies", "policy")
DISCOVERY: PluginKind[DiscoveryProvider] = PluginKind(
    "discovery", "turnout_register_discovery", "discovery provider", column="discovery"
)
CHAT_FORMATS: PluginKind[ChatFormat] = PluginKind(
    "chat_formats", "turnout_register_chat_formats", "chat format", column="chat format"
)

#: Every kind, in the order ``turnout plugins`` lists them.
PLUGIN_KINDS: tuple[PluginKind[Any], ...] = (
    TOOL_PARSERS,
    REASONING_PARSERS,
    POLICIES,
    DISCOVERY,
    CHAT_FORMATS,
)
