"""Mistral tool calls, both forms:

* ``[TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]`` (older tokenizers; a single object
  without the brackets is accepted too);
* ``[TOOL_CALLS]NAME[ARGS]{...}`` per call (tokenizers v11+), optionally
  ``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}`` (the model's id is not used).

Call ids given to clients are 9 letters and digits: Mistral's chat templates refuse any other id
when the calls come back in the conversation.

Choices (identical in streaming and one-shot):

* Arguments may contain brackets and braces: the JSON is scanned outside strings, never with a
  regex. They are kept verbatim; a call is released once complete.
* The ``[TOOL_CALLS]`` token, the array brackets and the commas between calls are dropped; a
  ``]`` or text after the array is normal text. Text before, between and after calls is kept.
* A ``[TOOL_CALLS]`` followed by neither form stays normal text; broken calls and unknown
  functions follow the project rules (a rejected compact call keeps its raw text, token
  included; a rejected array element keeps its object's text).
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import ClassVar

from turnout.tool_calls.base import FAILED, OK
from turnout.tool_calls.json_calls import NAME_CHARS, BlockCallsParser
from turnout.tool_calls.types import CallIdStyle

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_ID_CHARS = re.compile(r"[A-Za-z0-9_\-.:]*")


class MistralToolParser(BlockCallsParser):
    """``[TOOL_CALLS]`` JSON arrays and compact ``NAME[ARGS]{json}`` calls."""

    call_id_style: ClassVar[CallIdStyle] = "mistral"
    START_MARKERS: ClassVar[tuple[str, ...]] = (TOOL_CALLS,)

    def other_block(self) -> Generator[None, None, None]:
        found = yield from self.name_until((ARGS, CALL_ID), NAME_CHARS)
        if (
            found is not None
            and found[1] == CALL_ID
            and (yield from self.name_until((ARGS,), _ID_CHARS, 64)) is None
        ):
            found = None
        if found is None or not found[0]:
            self.release()
            return
        outcome = yield from self.named_call(found[0])
        if outcome == FAILED:
            self.release()
        elif outcome == OK:
            self.drop()
