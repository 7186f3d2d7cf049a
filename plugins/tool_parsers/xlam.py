"""Salesforce xLAM tool calls: a JSON array of ``{"name": N, "arguments": {...}}`` objects.

The array may be bare, inside a ```` ```json ```` fence, after ``[TOOL_CALLS]``, inside
``<tool_call>...</tool_call>`` or after ``</think>``. Choices (identical in streaming and
one-shot): those wrappers are dropped around calls (and kept when no call follows); the array's
brackets and commas are dropped; a single object is accepted; JSON that is not call-shaped (first
keys other than ``name``/``arguments``) stays normal text verbatim. Broken calls and unknown
functions follow the project rules (see the ``json`` format).
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.base import CallShape
from turnout.tool_calls.json_calls import BareJsonParser


class XlamToolParser(BareJsonParser):
    """xLAM JSON arrays, bare or wrapped."""

    TAGS: ClassVar[tuple[str, ...]] = ("```json", "[TOOL_CALLS]", "<tool_call>", "</think>")
    END_MARKERS: ClassVar[tuple[str, ...]] = ("```", "</tool_call>")
    SHAPE: ClassVar[CallShape] = CallShape(strict=True, extra_keys=("type", "id"))
