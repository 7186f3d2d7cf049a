"""Kimi-K2 tool calls.

``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>``

``IDX`` is a conversation-level counter; the server derives the call id (``call_id_style``
"kimi"), the parser only needs the name. Choices (identical in streaming and one-shot):

* The id never fails the parse: ``functions.NAME:IDX`` gives ``NAME``; dotted names other than
  the ``functions.`` prefix are kept (``api.tools.search:1`` -> ``api.tools.search``); ids that
  clients sanitised (``functions_get_weather_0``, ``functionsexec5``) are matched against the
  request's tools, or without tools stripped of the ``functions`` prefix and the index.
* Whitespace around the id and the argument markers is allowed
  (``<|tool_call_begin|> functions.f:0 <|tool_call_argument_begin|> {...} <|tool_call_end|>``).
* Arguments are verbatim. A call is accepted without the section token (singular
  ``<|tool_call_section_begin|>`` is accepted too); a missing section end is tolerated.
* Tokens of a recognised section are dropped from the normal text, text around it is kept.
  Broken calls and unknown functions follow the DeepSeek V3.1 rules (see that module).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import ClassVar

from turnout.tool_calls.json_calls import TaggedCallsParser
from turnout.tool_calls.types import CallIdStyle

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARG_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"
_ID_CHARS = re.compile(r"[^\s<>{}\[\]\"'`]*")
_COLON_INDEX = re.compile(r":\d+\Z")
_SANITISED_INDEX = re.compile(r"[_\-.:]?\d+\Z")
_PREFIX = re.compile(r"functions[._\-:]?")


def function_name(call_id: str, names: frozenset[str] | None) -> str:
    """The function name inside a Kimi call id (never empty for a non-empty id)."""
    if names is not None:
        for name in sorted(names, key=len, reverse=True):
            if re.fullmatch(rf"(?:functions[._\-:]?)?{re.escape(name)}(?:[_\-.:]?\d+)?", call_id):
                return name
    if ":" in call_id:
        base = _COLON_INDEX.sub("", call_id)
        if base.startswith("functions."):
            base = base[len("functions.") :]
        return base or call_id
    base = _SANITISED_INDEX.sub("", call_id) or call_id
    prefix = _PREFIX.match(base)
    if prefix and prefix.end() < len(base):
        base = base[prefix.end() :]
    return base


class KimiK2ToolParser(TaggedCallsParser):
    """Kimi-K2 tool-call sections."""

    call_id_style: ClassVar[CallIdStyle] = "kimi"
    BLOCK_BEGINS: ClassVar[tuple[str, ...]] = (SECTION_BEGIN, "<|tool_call_section_begin|>")
    BLOCK_ENDS: ClassVar[tuple[str, ...]] = (SECTION_END, "<|tool_call_section_end|>")
    CALL_BEGIN: ClassVar[str] = CALL_BEGIN
    CALL_END: ClassVar[str] = CALL_END

    def call_head(self) -> Generator[None, None, str | None]:
        yield from self.skip_ws()
        call_id = yield from self.word(_ID_CHARS)
        if not call_id:
            return None
        yield from self.skip_ws()
        if not (yield from self.expect(ARG_BEGIN)):
            return None
        return function_name(call_id, self._names)
