"""A tool-call format of a made-up model: ``[call]{"name": N, "arguments": {...}}[/call]``.

The format is "markers around JSON", so the parser is a few declarative lines on turnout's own
base: it streams, holds a call until its JSON is complete, keeps broken calls and calls to
functions the request did not offer as text, and accepts an array of calls inside the markers,
exactly as the built-in parsers do.
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls import BlockCallsParser


class BracketCallsParser(BlockCallsParser):
    """``[call]`` JSON ``[/call]`` blocks."""

    START_MARKERS: ClassVar[tuple[str, ...]] = ("[call]",)
    END_MARKERS: ClassVar[tuple[str, ...]] = ("[/call]",)
    #: The markers are plain text, not special tokens.
    needs_special_tokens: ClassVar[bool] = False
