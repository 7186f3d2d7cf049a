"""Kimi-K2 thinking: `<think>` … `</think>`; the tool section also ends reasoning.

The model may open ``<|tool_calls_section_begin|>`` without closing its reasoning. That marker then
ends reasoning and stays at the start of the normal text so that the Kimi-K2 tool parser sees it.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class KimiK2ReasoningParser(MarkerReasoningParser):
    """Kimi-K2: ``<think>`` … ``</think>`` or … ``<|tool_calls_section_begin|>``."""

    interrupt_markers = ("<|tool_calls_section_begin|>",)
    needs_special_tokens = True
