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


class TooManyTokens(TurnoutError):
    """A text has more tokens than allowed; ``tokens`` is the count, or with ``at_least`` a lower
    bound known from the text's length alone (the text was not tokenized)."""

    def __init__(self, tokens: int, limit: int, *, at_least: bool) -> None:
        bound = "at least " if at_least else ""
        super().__init__(f"the text has {bound}{tokens} tokens, more than {limit}")
        self.tokens = tokens
        self.limit = limit
        self.at_least = at_least
