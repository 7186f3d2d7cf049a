"""Errors raised while loading a model's tokenizer files and while rendering chat templates."""

from __future__ import annotations

from turnout.errors import StartupError, TurnoutError


class ModelFilesError(StartupError):
    """A model directory is missing a file, or a file in it is unreadable or malformed.

    The message names the file and what is wrong with it.
    """


class ChatTemplateError(TurnoutError):
    """A chat template refused or failed to render a conversation.

    Raised for the template's own ``raise_exception(...)`` calls, misuse of undefined values and
    malformed conversations. The message is meant for the client (the pipeline answers HTTP 400).
    """
