"""ByteDance Seed-OSS: `<seed:think>` … `</seed:think>`.

Thinking-budget notes (``<seed:cot_budget_reflect>…``) inside reasoning stay part of the
reasoning text.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class SeedOssReasoningParser(MarkerReasoningParser):
    """Seed-OSS: ``<seed:think>`` … ``</seed:think>``."""

    start_marker = "<seed:think>"
    end_markers = ("</seed:think>",)
    needs_special_tokens = True
