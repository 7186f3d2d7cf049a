"""DeepSeek V3 / R1 tool calls.

``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```<｜tool▁call▁end｜>``
repeated, then ``<｜tool▁calls▁end｜>``. Choices (identical in streaming and one-shot):

* The call type word before ``<｜tool▁sep｜>`` is not checked (always ``function``); the name runs
  to the end of its line; the fence may be ```` ```json```` or a bare ```` ``` ````.
* The arguments JSON inside the fence is kept verbatim; the closing fence is optional before
  ``<｜tool▁call▁end｜>``. End tokens never reach arguments or normal text.
* Blocks, broken calls and unknown functions follow the DeepSeek V3.1 rules (see that module).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import ClassVar

from turnout.tool_calls.json_calls import NAME_CHARS, TaggedCallsParser

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
_TYPE = re.compile(r"[A-Za-z_]*")
_FENCE = "```"


class DeepSeekV3ToolParser(TaggedCallsParser):
    """DeepSeek V3: ``function<｜tool▁sep｜>NAME`` + a fenced JSON block per call."""

    BLOCK_BEGINS: ClassVar[tuple[str, ...]] = (CALLS_BEGIN,)
    BLOCK_ENDS: ClassVar[tuple[str, ...]] = (CALLS_END,)
    CALL_BEGIN: ClassVar[str] = CALL_BEGIN
    CALL_END: ClassVar[str] = CALL_END

    def call_head(self) -> Generator[None, None, str | None]:
        if (yield from self.name_until((SEP,), _TYPE, 32)) is None:
            return None
        name = yield from self.word(NAME_CHARS)
        if not name:
            return None
        yield from self.skip_ws()
        if (yield from self.expect_any(("```json", _FENCE))) is None:
            return None
        return name

    def call_tail(self) -> Generator[None, None, bool]:
        yield from self.skip_ws()
        yield from self.expect(_FENCE)
        yield from self.skip_ws()
        return (yield from self.expect(CALL_END))
