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
