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

    def _call_head(self) -> Generator[None, None, str | None]:
        if (yield from self._name_until((SEP,), _TYPE, 32)) is None:
            return None
        name = yield from self._word(NAME_CHARS)
        if not name:
            return None
        yield from self._ws()
        if (yield from self._expect_any(("```json", _FENCE))) is None:
            return None
        return name

    def _call_tail(self) -> Generator[None, None, bool]:
        yield from self._ws()
        yield from self._expect(_FENCE)
        yield from self._ws()
        return (yield from self._expect(CALL_END))
