"""Qwen3 thinking-only models (``*-Thinking-2507``): the template opens ``<think>`` in the prompt.

The output therefore starts inside reasoning and only ``</think>`` appears in it; everything
before it is reasoning, also when the parser is used on its own. A ``<tool_call>`` inside
unterminated reasoning ends it, as for the hybrid models.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Qwen3ThinkingReasoningParser(MarkerReasoningParser):
    """Qwen3 thinking-only: starts in reasoning."""

    starts_in_reasoning = True
    interrupt_markers = ("<tool_call>",)
