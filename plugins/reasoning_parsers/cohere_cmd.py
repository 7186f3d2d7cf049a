"""Cohere Command A Reasoning / Command 4: `<|START_THINKING|>` … `<|END_THINKING|>`."""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class CohereCmdReasoningParser(MarkerReasoningParser):
    """Cohere Command: special-token thinking markers."""

    start_marker = "<|START_THINKING|>"
    end_markers = ("<|END_THINKING|>",)
    needs_special_tokens = True
