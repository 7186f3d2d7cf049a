"""Cohere Command R / A tool calls.

``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": N, "parameters": {...}}, ...]<|END_ACTION|>``;
the answer text may be wrapped in ``<|START_RESPONSE|>...<|END_RESPONSE|>``. Choices (identical in
streaming and one-shot):

* ``tool_name`` (or ``name``) gives the name, ``parameters`` (or ``arguments``) the arguments,
  missing ones give ``{}``; ``tool_call_id`` and other keys are ignored. A single object without
  the brackets is accepted.
* ``<|END_ACTION|>`` inside a JSON string does not end the block (the JSON is scanned). The
  action tokens, brackets and commas are dropped; ``<|START_RESPONSE|>``/``<|END_RESPONSE|>`` are
  removed from the normal text wherever they appear; other text is kept exactly.
* Broken calls and unknown functions follow the project rules.
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.base import CallShape
from turnout.tool_calls.json_calls import BlockCallsParser


class CohereToolParser(BlockCallsParser):
    """Cohere ``<|START_ACTION|>`` JSON arrays."""

    START_MARKERS: ClassVar[tuple[str, ...]] = ("<|START_ACTION|>",)
    END_MARKERS: ClassVar[tuple[str, ...]] = ("<|END_ACTION|>",)
    DROP_MARKERS: ClassVar[tuple[str, ...]] = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
    SHAPE: ClassVar[CallShape] = CallShape(
        name_keys=("tool_name", "name"), args_keys=("parameters", "arguments")
    )
