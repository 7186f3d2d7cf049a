"""The ``harmony`` chat format's factory: openai-harmony is imported only when a model uses the
format, so turnout without ``turnout[harmony]`` loads its plugins and names the extra then."""

from __future__ import annotations

from turnout.chat_formats.types import ChatFormat


def harmony_chat_format() -> ChatFormat:
    """gpt-oss through openai-harmony (:class:`turnout.plugins.harmony.HarmonyChatFormat`)."""
    from turnout.plugins.harmony import HarmonyChatFormat  # here: it needs the extra

    return HarmonyChatFormat()
