"""GLM-4.5 / 4.6 / 4.7 / 5: `<think>` … `</think>`.

With ``enable_thinking`` on (the default) the model writes ``<think>`` itself; off, the template
adds an empty ``<think></think>`` to the prompt.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Glm45ReasoningParser(MarkerReasoningParser):
    """GLM-4.5 family: reasoning after a leading ``<think>``."""
