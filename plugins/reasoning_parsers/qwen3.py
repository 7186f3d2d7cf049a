"""Qwen3 hybrid models: `<think>` … `</think>`; thinking is switched per request.

With ``enable_thinking`` on (the template default) the model writes ``<think>`` itself; with it off
the template puts an empty ``<think></think>`` into the prompt and the output is plain content.
The pipeline passes ``start_in_reasoning=True`` when the prompt already ends with ``<think>``.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Qwen3ReasoningParser(MarkerReasoningParser):
    """Qwen3: reasoning only after a leading ``<think>`` (or when the request says so)."""
