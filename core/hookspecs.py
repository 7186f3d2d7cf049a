"""Hook specifications: the public plugin API of turnout.

A plugin is a module (or object) with functions marked ``@turnout.hookimpl`` and named after the
specs below, made known to turnout by an entry point in the group ``turnout.plugins``::

    [project.entry-points."turnout.plugins"]
    my_parsers = "my_package.turnout_plugin"

Each hook receives a ``register`` callable::

    register(name, factory, *, models=(), aliases=(), description="")

- ``name``: the canonical name users put in the config (``tool_parser: my_format``).
- ``factory``: a class or callable returning a fresh instance, or a lazy ``"module:attr"`` string
  that turnout imports only when the name is selected (keeps start-up cheap).
- ``models``: model-name glob patterns (case-insensitive, ``fnmatch`` style) served by default
  when the config names no parser/policy for a model.
- ``aliases``: other names that select the same factory.
- ``description``: one line shown by ``turnout plugins``.

Hooks run once, at start-up. Requests never go through pluggy.
"""

from __future__ import annotations

from typing import Protocol

import pluggy

PROJECT_NAME = "turnout"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class Register(Protocol):
    """The ``register`` callable handed to every ``turnout_register_*`` hook."""

    def __call__(
        self,
        name: str,
        factory: object,
        *,
        models: tuple[str, ...] | list[str] = (),
        aliases: tuple[str, ...] | list[str] = (),
        description: str = "",
    ) -> None:
        """Register ``factory`` under ``name`` (see the module docstring)."""
        ...


@hookspec
def turnout_register_tool_parsers(register: Register) -> None:
    """Register tool-call parsers.

    A tool-parser factory is called with no arguments and returns an object implementing
    :class:`turnout.tool_calls.ToolParser` that serves exactly one output (one choice). ``models``
    patterns pick the parser for matching model ids when the config does not name one.
    """


@hookspec
def turnout_register_reasoning_parsers(register: Register) -> None:
    """Register reasoning parsers.

    A reasoning-parser factory is called as ``factory(start_in_reasoning=None | bool)`` and
    returns an object implementing :class:`turnout.reasoning.ReasoningParser` for one output.
    """


@hookspec
def turnout_register_policies(register: Register) -> None:
    """Register worker selection policies.

    A policy factory is called with the policy's parameters from the config as keyword
    arguments and returns an object implementing :class:`turnout.routing.Policy`. One instance
    serves one model for the life of the configuration.
    """


@hookspec
def turnout_register_discovery(register: Register) -> None:
    """Register discovery providers (sources of workers that join and leave at run time).

    A provider factory is called with the options of a ``discovery`` config entry as keyword
    arguments and returns an object implementing :class:`turnout.discovery.DiscoveryProvider`.
    It must only check its options (raise ``ValueError`` or ``TypeError`` naming the bad one)
    and do no I/O: ``turnout check`` creates providers without starting them.
    """
