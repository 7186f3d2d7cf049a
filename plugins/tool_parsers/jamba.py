"""AI21 Jamba tool calls: ``<tool_calls>[{"name": N, "arguments": {...}}, ...]</tool_calls>``.

Choices (identical in streaming and one-shot): tags, brackets and commas are dropped (a missing
``</tool_calls>`` at the end is tolerated); a single object inside the tags is accepted; text
around the block is kept exactly. Broken calls and unknown functions follow the project rules.
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.json_calls import BlockCallsParser


class JambaToolParser(BlockCallsParser):
    """Jamba ``<tool_calls>`` JSON arrays."""

    START_MARKERS: ClassVar[tuple[str, ...]] = ("<tool_calls>",)
    END_MARKERS: ClassVar[tuple[str, ...]] = ("</tool_calls>",)
