"""DeepSeek V3.1 tool calls.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``
(full-width bars, U+2581 in the token names). Choices (identical in streaming and one-shot):

* The arguments JSON is kept verbatim, whitespace of the model kept; the call is released once
  it is complete (docs/plugins.md, "When calls are released").
* A call is accepted without the outer begin token; a missing outer end token is tolerated; a
  missing ``<｜tool▁call▁end｜>`` ends the block (what follows is normal text).
* All tokens of a recognised block are dropped from the normal text; text around blocks is kept.
* A name that is not a plain token, or broken or unfinished arguments, leave the call's text as
  normal text (an output cut off by ``max_tokens`` keeps the open call, arguments as received).
* With tools, a call to another function keeps its raw text from ``<｜tool▁call▁begin｜>`` to
  ``<｜tool▁call▁end｜>`` in the normal text.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import ClassVar

from turnout.tool_calls.json_calls import NAME_CHARS, TaggedCallsParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


class DeepSeekV31ToolParser(TaggedCallsParser):
    """DeepSeek V3.1: ``NAME<｜tool▁sep｜>{json}`` per call."""

    BLOCK_BEGINS: ClassVar[tuple[str, ...]] = (CALLS_BEGIN,)
    BLOCK_ENDS: ClassVar[tuple[str, ...]] = (CALLS_END,)
    CALL_BEGIN: ClassVar[str] = CALL_BEGIN
    CALL_END: ClassVar[str] = CALL_END

    def call_head(self) -> Generator[None, None, str | None]:
        found = yield from self.name_until((SEP,), NAME_CHARS)
        return None if found is None or not found[0] else found[0]
