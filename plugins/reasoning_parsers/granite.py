"""Granite 3.2: plain-text phrases "Here is my thought process:" … "Here is my response:".

The contracted forms ("Here's my …") count too. Bytes around the phrases are kept, including the
newline the model writes after each phrase (normal text usually starts with ``"\\n"``).
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class GraniteReasoningParser(MarkerReasoningParser):
    """Granite 3.2: reasoning between two plain-text phrases."""

    start_marker = "Here is my thought process:"
    start_markers = ("Here is my thought process:", "Here's my thought process:")
    end_markers = ("Here is my response:", "Here's my response:")
