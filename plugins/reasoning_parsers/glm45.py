"""GLM-4.5 / 4.6 / 4.7 / 5: `<think>` … `</think>`; thinking is on by default.

GLM-4.5/4.6 write ``<think>`` themselves, GLM-4.7/5 templates open it in the prompt, and with
``enable_thinking`` off the templates put an empty ``<think></think>`` into the prompt. The
output starts outside reasoning, as SGLang's and smg's parsers do (plain text stays content when
the parser is used on its own): the prompt decides, the pipeline passing
``start_in_reasoning=True`` when it ends with ``<think>`` (then an ``</think>`` ends reasoning
the prompt opened) and turning the parser off when the request disables thinking. A
``<tool_call>`` inside unterminated reasoning ends it and stays in the normal text for the tool
parser.
"""

from __future__ import annotations

from turnout.reasoning.base import MarkerReasoningParser


class Glm45ReasoningParser(MarkerReasoningParser):
    """GLM-4.5 family: ``<think>`` (or the prompt) opens reasoning; ``</think>`` or
    ``<tool_call>`` ends it."""

    interrupt_markers = ("<tool_call>",)
