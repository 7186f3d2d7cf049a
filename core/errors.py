"""Errors turnout raises at start-up and while serving."""

from __future__ import annotations


class TurnoutError(Exception):
    """Base class of turnout's own errors."""


class StartupError(TurnoutError):
    """A problem the user must fix before turnout can start (config, plugins, model files)."""


class PluginError(StartupError):
    """A plugin could not be loaded, conflicts with another, or was not found."""


class ConfigError(StartupError):
    """The configuration is invalid; the message names the key path and the bad value."""


class ParserError(TurnoutError):
    """A tool-call or reasoning parser raised while reading output: a defect of that parser
    (any text is valid input to a parser), attributed to its registered name.

    ``kind`` is ``"tool"`` or ``"reasoning"``; the parser's own exception is ``__cause__``.
    """

    def __init__(self, kind: str, name: str, cause: BaseException) -> None:
        super().__init__(f"{kind} parser {name!r} failed: {type(cause).__name__}")
        self.kind = kind
        self.name = name
        self.__cause__ = cause
