"""Built-in chat formats, registered lazily (using one needs its extra)."""

from __future__ import annotations

from turnout.hookspecs import ChatFormatRegister, hookimpl

# (canonical name, "module:Class", aliases, description)
BUILTIN_CHAT_FORMATS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    (
        "harmony",
        "turnout.plugins.chat_formats.harmony:harmony_chat_format",
        ("openai_harmony",),
        "gpt-oss through openai-harmony: prompts, reasoning, tool calls (turnout[harmony])",
    ),
)


@hookimpl
def turnout_register_chat_formats(register: ChatFormatRegister) -> None:
    """Register every built-in chat format by its lazy import path. None is chosen by model
    name: a model uses one when the config names it (``models.<id>.chat_format``)."""
    for name, target, aliases, description in BUILTIN_CHAT_FORMATS:
        register(name, target, aliases=aliases, description=description)
