"""GLM-4.5 / 4.6 / 4.7 / 5: `<think>` … `</think>`; thinking is on by default.

GLM-4.5/4.6 write ``<think>`` themselves, GLM-4.7/5 templates open it in the prompt, and with
``enable_thinking`` off the templates put an empty ``<think></think>`` into the prompt. The
output is therefore taken to start in reasoning: a leading ``<think>`` is removed, and an
``</think>`` without one ends reasoning the prompt opened (also when the parser is used on its
own). The pipeline passes ``start_in_reasoning=False`` when the prompt ends with ``</think>``
and turns the parser off when the request disables thinking. A ``<tool_call>`` inside
unterminated reasoning ends it and stays in the normal text for the tool parser.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Glm45ReasoningParser(MarkerReasoningParser):
    """GLM-4.5 family: starts in reasoning; ``</think>`` or ``<tool_call>`` ends it."""

    starts_in_reasoning = True
    interrupt_markers = ("<tool_call>",)
