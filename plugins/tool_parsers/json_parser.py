"""Bare JSON tool calls: ``{"name": N, "arguments": {...}}`` or an array of such objects.

Used for models without a dedicated format (and for constrained ``tool_choice`` output). The
objects may be surrounded by prose. Choices (identical in streaming and one-shot):

* An object is a call only when its first keys are ``name`` and ``arguments`` (or
  ``parameters``), in either order (``type`` and ``id`` may appear among them); anything else
  that looks like JSON stays normal text verbatim, so a ``{``-prefixed answer is never lost.
* The call is recognised once both keys are seen and the name is complete, and released when
  its object closes; arguments are verbatim. A call that breaks (or is unfinished at the end of
  output) is normal text; the rest is read as normal output.
* In an array ``[call, call]`` the brackets and commas are dropped; an array whose first element
  is not a call stays text. Text around the calls is kept exactly.
* With tools, a call to another function stays in the normal text (its object's raw text; the
  brackets of an array around it are dropped).
"""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.base import CallShape
from turnout.tool_calls.json_calls import BareJsonParser


class JsonToolParser(BareJsonParser):
    """Bare JSON call objects and arrays."""

    SHAPE: ClassVar[CallShape] = CallShape(strict=True, extra_keys=("type", "id"))
