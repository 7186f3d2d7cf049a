"""Chat formats: plugins that render a chat request to prompt token ids and read the output
token ids, in place of the chat template and the text parsers (gpt-oss through
``openai-harmony``)."""

from turnout.chat_formats.types import ChatFormat, ChatPrompt, FormatDelta, OutputReader

__all__ = ["ChatFormat", "ChatPrompt", "FormatDelta", "OutputReader"]
