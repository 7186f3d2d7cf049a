"""IBM Granite tool calls: ``<|tool_call|>[{"name": N, "arguments": {...}}, ...]`` (Granite 3.0)
or ``<tool_call>[...]`` (3.1); a single object without brackets is accepted too.

Choices (identical in streaming and one-shot): the start token, brackets and commas are dropped,
an optional ``</tool_call>`` after the array too; text around the calls is kept exactly.
``parameters`` is accepted for ``arguments``. Broken calls and unknown functions follow the
project rules.
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.json_calls import BlockCallsParser


class GraniteToolParser(BlockCallsParser):
    """Granite ``<|tool_call|>`` / ``<tool_call>`` JSON arrays."""

    START_MARKERS: ClassVar[tuple[str, ...]] = ("<|tool_call|>", "<tool_call>")
    END_MARKERS: ClassVar[tuple[str, ...]] = ("</tool_call>",)
