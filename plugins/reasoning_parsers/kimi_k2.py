"""Kimi-K2 thinking models (K2-Thinking, K2.5): `<think>` … `</think>`.

Thinking is on by default and the K2.5 template opens ``<think>`` in the prompt (an empty
``<think></think>`` when thinking is off), so the output is taken to start in reasoning: a
leading ``<think>`` is removed and an ``</think>`` without one ends reasoning the prompt opened.
The non-thinking Kimi-K2-Instruct models are not matched by this parser's model patterns.

The model may open ``<|tool_calls_section_begin|>`` without closing its reasoning. That marker then
ends reasoning and stays at the start of the normal text so that the Kimi-K2 tool parser sees it.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class KimiK2ReasoningParser(MarkerReasoningParser):
    """Kimi-K2 thinking: starts in reasoning; ``</think>`` or the tool section ends it."""

    starts_in_reasoning = True
    interrupt_markers = ("<|tool_calls_section_begin|>",)
    needs_special_tokens = True
