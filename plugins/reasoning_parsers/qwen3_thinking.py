"""Qwen3 thinking-only models (``*-Thinking-2507``): the template opens ``<think>`` in the prompt.

The output therefore starts inside reasoning and only ``</think>`` appears in it.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Qwen3ThinkingReasoningParser(MarkerReasoningParser):
    """Qwen3 thinking-only: starts in reasoning."""

    starts_in_reasoning = True
