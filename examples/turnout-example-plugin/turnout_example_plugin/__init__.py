"""A minimal turnout plugin: a tool parser for ``CALL name {json}`` lines and a policy."""

from __future__ import annotations

from turnout import hookimpl
from turnout.hookspecs import Register


@hookimpl
def turnout_register_tool_parsers(register: Register) -> None:
    register(
        "call_lines",
        "turnout_example_plugin.parser:CallLinesParser",
        models=["example-*"],
        description="one call per line: CALL name {json arguments}",
    )


@hookimpl
def turnout_register_policies(register: Register) -> None:
    register("first_worker", "turnout_example_plugin.policy:FirstWorkerPolicy")
