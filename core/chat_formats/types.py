"""The chat format plugin API.

A model served with a chat format skips the chat template, the detokenizer and the reasoning and
tool parsers: :meth:`ChatFormat.render` turns the request's messages into prompt token ids, and
one :class:`OutputReader` per choice turns the output's token ids into reasoning, content and
tool-call pieces. The factory registered under ``turnout_register_chat_formats`` is called once
per model when its runtime is built (off the event loop: loading may be slow); the instance
serves every request for that model, so it must keep no per-request state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["ChatFormat", "ChatPrompt", "FormatDelta", "OutputReader"]


@dataclass(frozen=True, slots=True)
class ChatPrompt:
    """What a chat request renders to."""

    ids: list[int]
    #: The prompt's text (the worker gets it as information; policies may route on it).
    text: str = ""


@dataclass(frozen=True, slots=True)
class FormatDelta:
    """A piece of output: ``text`` of the reasoning, of the content, or of call ``call``'s
    arguments (the first piece of a call carries its function ``name``)."""

    kind: Literal["reasoning", "content", "call"]
    text: str
    call: int | None = None
    name: str | None = None


@runtime_checkable
class OutputReader(Protocol):
    """Reads one output (one choice of one request) token by token."""

    def feed(self, token_ids: Sequence[int]) -> list[FormatDelta]:
        """Pieces for the next output tokens (stop tokens included)."""
        ...

    def finish(self) -> list[FormatDelta]:
        """Pieces still held at the end of the output."""
        ...


@runtime_checkable
class ChatFormat(Protocol):
    """Renders chat requests and reads outputs for one model."""

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        options: Mapping[str, Any],
    ) -> ChatPrompt:
        """The prompt of the assistant's next turn. ``options`` are the request's
        ``chat_template_kwargs`` with its ``reasoning_effort``. Bad input raises
        :class:`turnout.tokenizer.ChatTemplateError` (a 400 for the client)."""
        ...

    def reader(self) -> OutputReader:
        """A fresh reader for one output."""
        ...
