"""Llama 3.x JSON tool calls: optional ``<|python_tag|>`` then ``{"name": N, "parameters": {...}}``.

Several calls are separated by ``;`` (a repeated ``<|python_tag|>`` is accepted too). Choices
(identical in streaming and one-shot):

* An object is a call only when its first keys are ``name`` and ``parameters`` (or
  ``arguments``), in either order; other JSON stays normal text verbatim. Calls are found
  anywhere in the text (Llama often writes a short preamble); the prose around them is kept.
* ``;`` and ``<|python_tag|>`` between two calls are dropped; a trailing ``;`` not followed by a
  call stays text. A ``<|python_tag|>`` not followed by a JSON call (Llama's built-in
  ``brave_search.call(...)`` tools) stays normal text.
* Name, arguments, broken and unknown calls follow the project rules (see ``json`` format).
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.base import CallShape
from turnout.tool_calls.json_calls import BareJsonParser

PYTHON_TAG = "<|python_tag|>"


class LlamaToolParser(BareJsonParser):
    """Llama 3.x JSON tool calls."""

    TAGS: ClassVar[tuple[str, ...]] = (PYTHON_TAG,)
    SEPARATOR: ClassVar[str] = ";"
    SHAPE: ClassVar[CallShape] = CallShape(
        args_keys=("parameters", "arguments"), strict=True, extra_keys=("type",)
    )
    ALLOW_ARRAY: ClassVar[bool] = False
    needs_special_tokens: ClassVar[bool] = True
