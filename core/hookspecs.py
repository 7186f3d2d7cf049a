"""Hook specifications: the public plugin API of turnout.

A plugin is a module (or object) with functions marked ``@turnout.hookimpl`` and named after the
specs below, made known to turnout by an entry point in the group ``turnout.plugins``::

    [project.entry-points."turnout.plugins"]
    my_parsers = "my_package.turnout_plugin"

Each hook receives a ``register`` callable, typed by what its factories make
(:data:`ToolParserRegister`, :data:`ReasoningParserRegister`, :data:`PolicyRegister`,
:data:`DiscoveryRegister`, :data:`ChatFormatRegister`)::

    register(name, factory, *, models=(), aliases=(), description="")

- ``name``: the canonical name users put in the config (``tool_parser: my_format``).
- ``factory``: a class or callable returning a fresh instance (:data:`ToolParserFactory`, ...),
  or a lazy ``"module:attr"`` string that turnout imports only when the name is selected (keeps
  start-up cheap).
- ``models``: model-name glob patterns (case-insensitive, ``fnmatch`` style) served by default
  when the config names no parser/policy for a model.
- ``aliases``: other names that select the same factory.
- ``description``: one line shown by ``turnout plugins``.

Hooks run once, at start-up. Requests never go through pluggy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

import pluggy

if TYPE_CHECKING:
    from turnout.chat_formats.types import ChatFormat
    from turnout.discovery.types import DiscoveryProvider
    from turnout.reasoning.types import ReasoningParser
    from turnout.routing.types import Policy
    from turnout.tool_calls.types import ToolParser

PROJECT_NAME = "turnout"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

F_contra = TypeVar("F_contra", contravariant=True)


class Register(Protocol[F_contra]):
    """The ``register`` callable handed to every ``turnout_register_*`` hook; ``F_contra`` is
    the type of the hook's factories (a lazy ``"module:attr"`` string is always accepted)."""

    def __call__(
        self,
        name: str,
        factory: F_contra | str,
        *,
        models: tuple[str, ...] | list[str] = (),
        aliases: tuple[str, ...] | list[str] = (),
        description: str = "",
    ) -> None:
        """Register ``factory`` under ``name`` (see the module docstring)."""
        ...


class ReasoningParserFactory(Protocol):
    """Makes one reasoning parser per output; ``start_in_reasoning=None``: the family's
    default. turnout also reads its class attributes ``start_marker``, ``end_markers`` and
    ``needs_special_tokens`` (a :class:`~turnout.reasoning.ReasoningParser` class is one)."""

    def __call__(self, *, start_in_reasoning: bool | None = None) -> ReasoningParser:
        """A fresh parser for one output."""
        ...


#: Makes one tool parser per output, called with no arguments (a parser class is one).
ToolParserFactory: TypeAlias = "Callable[[], ToolParser]"
#: Makes a model's policy, called with the policy's ``params`` from the config.
PolicyFactory: TypeAlias = "Callable[..., Policy]"
#: Makes the provider of a ``discovery`` entry, called with its ``options``.
DiscoveryFactory: TypeAlias = "Callable[..., DiscoveryProvider]"
#: Makes a model's chat format, called with no arguments.
ChatFormatFactory: TypeAlias = "Callable[[], ChatFormat]"

#: ``register`` of :func:`turnout_register_tool_parsers`.
ToolParserRegister: TypeAlias = Register[ToolParserFactory]
#: ``register`` of :func:`turnout_register_reasoning_parsers`.
ReasoningParserRegister: TypeAlias = Register[ReasoningParserFactory]
#: ``register`` of :func:`turnout_register_policies`.
PolicyRegister: TypeAlias = Register[PolicyFactory]
#: ``register`` of :func:`turnout_register_discovery`.
DiscoveryRegister: TypeAlias = Register[DiscoveryFactory]
#: ``register`` of :func:`turnout_register_chat_formats`.
ChatFormatRegister: TypeAlias = Register[ChatFormatFactory]


# -- Registration hooks -----------------------------------------------------------------------
#
# Every hook is called once per process, when turnout loads its plugins (``load_plugins``): at the
# start of ``turnout serve`` (in each serving process), and by ``turnout check`` and ``turnout
# plugins``. The registries they fill serve every request and every configuration reload of that
# process; requests never go through pluggy. A plugin installed or upgraded later is seen after a
# restart.


@hookspec
def turnout_register_tool_parsers(register: ToolParserRegister) -> None:
    """Register tool-call parsers, which turn a model's output into OpenAI ``tool_calls``.

    :param register: call ``register(name, factory, *, models=(), aliases=(), description="")``
        once per parser (see :class:`Register`). The factory is called with no arguments and
        returns a fresh object implementing :class:`turnout.tool_calls.ToolParser` that serves
        exactly one output (one choice of one request). ``models`` patterns pick the parser for
        matching model ids when the config names none.

    Called once per process when turnout loads its plugins (see above). The factory is called
    per choice of each chat request that parses tool calls, and by ``/parse/function_call``.

    .. versionadded:: 0.1.0
    """


@hookspec
def turnout_register_reasoning_parsers(register: ReasoningParserRegister) -> None:
    """Register reasoning parsers, which split reasoning text from the answer.

    :param register: call ``register(name, factory, *, models=(), aliases=(), description="")``
        once per parser (see :class:`Register`). The factory is called as
        ``factory(start_in_reasoning=None | bool)`` (``None``: the family's default) and returns
        a fresh object implementing :class:`turnout.reasoning.ReasoningParser` for one output.
        turnout reads the factory's class attributes ``start_marker``, ``end_markers`` and
        ``needs_special_tokens`` once per model.

    Called once per process when turnout loads its plugins (see above). The factory is called
    per choice of each chat request that separates reasoning, and by ``/parse/reasoning``.

    .. versionadded:: 0.1.0
    """


@hookspec
def turnout_register_policies(register: PolicyRegister) -> None:
    """Register worker selection policies, which pick the worker for each request.

    :param register: call ``register(name, factory, *, models=(), aliases=(), description="")``
        once per policy (see :class:`Register`). The factory is called with the policy's
        parameters from the config as keyword arguments and returns an object implementing
        :class:`turnout.routing.Policy`.

    Called once per process when turnout loads its plugins (see above). The factory is called
    once per model when the configuration is applied (at start-up and on each reload); that
    instance serves the model for the life of the configuration.

    .. versionadded:: 0.1.0
    """


@hookspec
def turnout_register_discovery(register: DiscoveryRegister) -> None:
    """Register discovery providers (sources of workers that join and leave at run time).

    :param register: call ``register(name, factory, *, models=(), aliases=(), description="")``
        once per provider (see :class:`Register`; ``models`` does not apply). The factory is
        called with the options of a ``discovery`` config entry as keyword arguments and returns
        an object implementing :class:`turnout.discovery.DiscoveryProvider`. It must only check
        its options (raise ``ValueError`` or ``TypeError`` naming the bad one) and do no I/O.

    Called once per process when turnout loads its plugins (see above). The factory is called
    for each ``discovery`` entry whenever a configuration is checked (start-up, reloads,
    ``turnout check``) and again for each entry a start-up or reload starts.

    .. versionadded:: 0.1.0
    """


@hookspec
def turnout_register_chat_formats(register: ChatFormatRegister) -> None:
    """Register chat formats, which render chat prompts and read outputs as token ids.

    :param register: call ``register(name, factory, *, models=(), aliases=(), description="")``
        once per format (see :class:`Register`). The factory is called with no arguments and
        returns an object implementing :class:`turnout.chat_formats.ChatFormat`, which replaces
        the chat template, the detokenizer and the reasoning and tool parsers of the chat
        endpoint for the models that use it. ``models`` patterns pick the format for matching
        model ids when the config names none.

    Called once per process when turnout loads its plugins (see above). The factory is called
    once per model that uses the format, when the model's runtime is built (off the event
    loop); that instance serves every chat request for the model.

    .. versionadded:: 0.1.0
    """
