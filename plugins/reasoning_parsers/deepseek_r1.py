"""DeepSeek-R1 (and QwQ): `<think>` … `</think>`; the output starts inside reasoning.

The chat template already ends the prompt with ``<think>\\n``, so the output usually has no start
marker; older templates let the model write it, and a leading ``<think>`` is removed either way.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class DeepSeekR1ReasoningParser(MarkerReasoningParser):
    """DeepSeek-R1: starts in reasoning; ``</think>`` ends it."""

    starts_in_reasoning = True
