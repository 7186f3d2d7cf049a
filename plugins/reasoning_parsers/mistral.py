"""Magistral: `[THINK]` … `[/THINK]`, both single control tokens.

The model writes ``[THINK]`` itself when its system prompt asks it to think, so the default is not
to start in reasoning. The tokens are special: decoding must keep them.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class MistralReasoningParser(MarkerReasoningParser):
    """Magistral: ``[THINK]`` … ``[/THINK]``."""

    start_marker = "[THINK]"
    end_markers = ("[/THINK]",)
    needs_special_tokens = True
