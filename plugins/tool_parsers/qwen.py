"""Qwen 2.5 / Qwen 3 and Hermes: ``<tool_call>{"name": N, "arguments": {...}}</tool_call>``.

One block per call, repeated for parallel calls; whitespace may surround the JSON object inside
the tags. Choices (identical in streaming and one-shot):

* Text before, between and after blocks is normal text, kept exactly; whitespace between the
  object and ``</tool_call>`` belongs to the block and is dropped with it.
* ``"parameters"`` is accepted for ``"arguments"``; other keys are ignored; keys in any order; a
  JSON string holding the arguments object is unwrapped once; missing arguments give ``{}``.
* The call is released once its JSON object is complete; a missing ``</tool_call>`` at the end
  of the output is tolerated (the call stands).
* A block whose content is not a JSON object with a string ``name`` stays normal text, tags
  included. So does a call that breaks after its name (invalid JSON, or the output ends first:
  ``<tool_call>{"name": "f", "arguments": {"city": "Par\\n</tool_call>``); the text from the
  offending character on is read as normal output. Cut off by ``max_tokens``, the open call is
  returned with its arguments as received.
* A call to a function not among the request's tools stays in the normal text verbatim, with
  its ``<tool_call>`` ... ``</tool_call>`` tags.
* An array inside the tags (``<tool_call>[{...}, {...}]</tool_call>``) is accepted too.
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.json_calls import BlockCallsParser

START = "<tool_call>"
END = "</tool_call>"


class QwenToolParser(BlockCallsParser):
    """Hermes-style ``<tool_call>`` JSON blocks (Qwen 2.5, Qwen 3, Hermes)."""

    START_MARKERS: ClassVar[tuple[str, ...]] = (START,)
    END_MARKERS: ClassVar[tuple[str, ...]] = (END,)
