"""Kimi-VL / Kimi k1.5 style thinking: `◁think▷` … `◁/think▷`.

The markers are plain characters, not special tokens.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class KimiReasoningParser(MarkerReasoningParser):
    """Kimi-VL: ``◁think▷`` … ``◁/think▷``."""

    start_marker = "◁think▷"
    end_markers = ("◁/think▷",)
