"""DeepSeek V3.1 / V3.2 / V4: `<think>` … `</think>`; thinking is switched per request.

The templates' ``thinking`` kwarg ends the prompt with ``<think>`` (thinking) or ``</think>``
(not); the pipeline passes ``start_in_reasoning=True`` in the first case.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class DeepSeekV31ReasoningParser(MarkerReasoningParser):
    """DeepSeek V3.1+: not in reasoning unless the request (or a leading ``<think>``) says so."""
