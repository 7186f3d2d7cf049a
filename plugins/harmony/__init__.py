"""gpt-oss through OpenAI's ``openai-harmony`` library, offline (``turnout[harmony]``).

:func:`load_gpt_oss_encoding` loads the harmony encoding without network access (see
:mod:`turnout.plugins.harmony.vocab`), :func:`render_chat` renders an OpenAI-style conversation
to prompt token ids, and :class:`HarmonyStream` / :func:`parse_output` read the model's output
tokens into reasoning, content and tool calls. Not yet registered as a plugin: the chat
endpoint will use it once a prompt builder can replace the chat template (issue 16).
"""

from turnout.plugins.harmony.encoding import load_gpt_oss_encoding
from turnout.plugins.harmony.parse import (
    HarmonyCall,
    HarmonyDelta,
    HarmonyOutput,
    HarmonyStream,
    parse_output,
)
from turnout.plugins.harmony.render import render_chat
from turnout.plugins.harmony.vocab import HarmonyUnavailable, o200k_vocab_dir

__all__ = [
    "HarmonyCall",
    "HarmonyDelta",
    "HarmonyOutput",
    "HarmonyStream",
    "HarmonyUnavailable",
    "load_gpt_oss_encoding",
    "o200k_vocab_dir",
    "parse_output",
    "render_chat",
]
