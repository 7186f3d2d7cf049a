"""The ``harmony`` chat format: gpt-oss prompts rendered and outputs read by ``openai-harmony``
(``models.<id>.chat_format: harmony``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from turnout.chat_formats.types import ChatPrompt
from turnout.plugins.harmony.encoding import load_gpt_oss_encoding
from turnout.plugins.harmony.parse import HarmonyStream
from turnout.plugins.harmony.render import render_chat

__all__ = ["HarmonyChatFormat"]


class HarmonyChatFormat:
    """gpt-oss's harmony format for one model; loads the encoding offline (about 2 s, once per
    process). ``options`` honoured: ``reasoning_effort`` (low, medium, high) and
    ``conversation_start_date``."""

    def __init__(self, vocab_dir: Path | None = None) -> None:
        self.encoding = load_gpt_oss_encoding(vocab_dir)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None,
        options: Mapping[str, Any],
    ) -> ChatPrompt:
        """The prompt of the assistant's next turn."""
        effort = options.get("reasoning_effort")
        date = options.get("conversation_start_date")
        ids = render_chat(
            self.encoding,
            messages,
            tools=tools,
            reasoning_effort=None if effort is None else str(effort),
            conversation_start_date=None if date is None else str(date),
        )
        return ChatPrompt(ids, self.encoding.decode(ids))

    def reader(self) -> HarmonyStream:
        """A fresh reader of one output."""
        return HarmonyStream(self.encoding)
