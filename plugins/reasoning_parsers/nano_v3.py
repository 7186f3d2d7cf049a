"""NVIDIA Nemotron 3 (Nano / Super): `<think>` … `</think>`.

Thinking is on by default in the template, which then ends the prompt with ``<think>``; the
pipeline notices that and passes ``start_in_reasoning=True``. A ``<tool_call>`` inside
unterminated reasoning ends it and stays in the normal text for the tool parser.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class NanoV3ReasoningParser(MarkerReasoningParser):
    """Nemotron 3: reasoning after ``<think>`` (in the output or the prompt)."""

    interrupt_markers = ("<tool_call>",)
