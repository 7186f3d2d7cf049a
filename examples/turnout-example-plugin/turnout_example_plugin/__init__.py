"""A turnout plugin: a tool parser, a policy and a discovery provider.

Each is registered by a lazy ``"module:attr"`` string, so its module is imported only when a
configuration selects it.
"""

from __future__ import annotations

from turnout import hookimpl
from turnout.hookspecs import DiscoveryRegister, PolicyRegister, ToolParserRegister


@hookimpl
def turnout_register_tool_parsers(register: ToolParserRegister) -> None:
    register(
        "bracket_calls",
        "turnout_example_plugin.parser:BracketCallsParser",
        models=["example-*"],
        description='[call]{"name": ..., "arguments": {...}}[/call]',
    )


@hookimpl
def turnout_register_policies(register: PolicyRegister) -> None:
    register(
        "pinned",
        "turnout_example_plugin.policy:PinnedPolicy",
        description="one worker by URL while it is healthy, else the least loaded",
    )


@hookimpl
def turnout_register_discovery(register: DiscoveryRegister) -> None:
    register(
        "static_list",
        "turnout_example_plugin.discovery:StaticListProvider",
        description="workers listed in the config entry's options",
    )
