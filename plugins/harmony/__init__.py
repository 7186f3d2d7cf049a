"""gpt-oss through OpenAI's ``openai-harmony`` library, offline (``turnout[harmony]``).

:func:`load_gpt_oss_encoding` loads the harmony encoding without network access (see
:mod:`turnout.plugins.harmony.vocab`), :func:`render_chat` renders an OpenAI-style conversation
to prompt token ids, and :class:`HarmonyStream` / :func:`parse_output` read the model's output
tokens into reasoning, content and tool calls. :class:`HarmonyChatFormat` puts them together as
the ``harmony`` chat format plugin (``models.<id>.chat_format: harmony``).
"""

import importlib.util

from turnout.plugins.harmony.vocab import HarmonyUnavailable, o200k_vocab_dir

if importlib.util.find_spec("openai_harmony") is None:  # say what to install (at start-up)
    raise HarmonyUnavailable(
        "gpt-oss through harmony needs openai-harmony: pip install 'turnout[harmony]'"
    )

# The rest imports openai_harmony.

from turnout.plugins.harmony.chat_format import HarmonyChatFormat
from turnout.plugins.harmony.encoding import load_gpt_oss_encoding
from turnout.plugins.harmony.parse import (
    HarmonyCall,
    HarmonyDelta,
    HarmonyOutput,
    HarmonyStream,
    parse_output,
)
from turnout.plugins.harmony.render import render_chat

__all__ = [
    "HarmonyCall",
    "HarmonyChatFormat",
    "HarmonyDelta",
    "HarmonyOutput",
    "HarmonyStream",
    "HarmonyUnavailable",
    "load_gpt_oss_encoding",
    "o200k_vocab_dir",
    "parse_output",
    "render_chat",
]
