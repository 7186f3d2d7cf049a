"""Step-3 / Step-3.5: `<think>` … `</think>`; the output starts inside reasoning."""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Step3ReasoningParser(MarkerReasoningParser):
    """Step-3: starts in reasoning."""

    starts_in_reasoning = True
