"""Tool-call parsing: the public parser API and the machinery shared by every parser.

What a parser is (:class:`ToolParser`) and returns (:class:`ToolParseResult`,
:class:`ToolParseStep`) comes first. Then the bases every built-in parser is written on, which
a plugin uses the same way (docs/plugins.md, "Tool parsers"):

* :class:`BlockCallsParser`: markers around a JSON call object or an array of them
  (``<tool_call>{"name": …, "arguments": …}</tool_call>``); set ``START_MARKERS`` and
  ``END_MARKERS``.
* :class:`BareJsonParser`: JSON call objects written directly in the text, after optional tags.
* :class:`TaggedCallsParser`: each call framed by markers, the name in the frame and the JSON
  arguments inside (override :meth:`~TaggedCallsParser.call_head`).
* :class:`XmlToolParser`: XML or key-value parameters (``<parameter=KEY>VALUE</parameter>``);
  set ``syntax`` to an :class:`XmlSyntax`.
* :class:`GrammarToolParser`: the engine under the first three, for a format of its own
  (override :meth:`~GrammarToolParser.grammar`).

Each holds a call until it is complete and valid and releases it whole, so streaming and
one-shot parsing agree for any chunking (check it with :mod:`turnout.testing`).
"""

from turnout.tool_calls.base import FAILED, OK, REJECTED, CallShape, GrammarToolParser
from turnout.tool_calls.json_calls import (
    NAME_CHARS,
    BareJsonParser,
    BlockCallsParser,
    TaggedCallsParser,
)
from turnout.tool_calls.types import (
    CallFormat,
    CallIdStyle,
    ToolCall,
    ToolCallDelta,
    ToolParser,
    ToolParseResult,
    ToolParseStep,
    Tools,
    fold_steps,
)
from turnout.tool_calls.xml_params import ValueRules
from turnout.tool_calls.xml_stream import (
    XmlSyntax,
    XmlToolParser,
    attr_key,
    attr_key_string,
    attr_name,
    plain_key,
    plain_name,
)

__all__ = [
    "FAILED",
    "NAME_CHARS",
    "OK",
    "REJECTED",
    "BareJsonParser",
    "BlockCallsParser",
    "CallFormat",
    "CallIdStyle",
    "CallShape",
    "GrammarToolParser",
    "TaggedCallsParser",
    "ToolCall",
    "ToolCallDelta",
    "ToolParseResult",
    "ToolParseStep",
    "ToolParser",
    "Tools",
    "ValueRules",
    "XmlSyntax",
    "XmlToolParser",
    "attr_key",
    "attr_key_string",
    "attr_name",
    "fold_steps",
    "plain_key",
    "plain_name",
]
