"""Qwen3 hybrid models: `<think>` … `</think>`; thinking is switched per request.

With ``enable_thinking`` on (the template default) the model writes ``<think>`` itself; with it off
the template puts an empty ``<think></think>`` into the prompt and the output is plain content.
The pipeline passes ``start_in_reasoning=True`` when the prompt already ends with ``<think>``.

Qwen3 (and Qwen3.5) sometimes opens ``<tool_call>`` without closing its reasoning: the tool-call
start then ends reasoning and stays in the normal text, for the tool parser.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Qwen3ReasoningParser(MarkerReasoningParser):
    """Qwen3: reasoning after ``<think>`` (or when the request says so), until ``</think>`` or
    ``<tool_call>``."""

    interrupt_markers = ("<tool_call>",)
