"""MiniMax-M2: ``<invoke>`` calls inside ``<minimax:tool_call>``.

Format (several invokes may share one block)::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Behaviour (shared XML rules in :mod:`turnout.tool_calls.xml_stream`): values are inline, with
XML entities decoded once (``&lt;`` ``&gt;`` ``&amp;`` ``&quot;`` ``&apos;`` and numeric
references; the model escapes them as smg and SGLang expect), then typed by the tool's JSON
schema. Without a schema type only numbers, booleans and null are inferred: JSON-looking
objects, arrays and quoted strings stay strings (as smg does). An ``<invoke>`` without a name is
not a call.
"""

from __future__ import annotations

from turnout.tool_calls.xml_params import ValueRules
from turnout.tool_calls.xml_stream import XmlSyntax, XmlToolParser, attr_key, attr_name


class MiniMaxM2ToolParser(XmlToolParser):
    """``<minimax:tool_call><invoke name=…><parameter name=…>value</parameter>…`` (MiniMax-M2)."""

    syntax = XmlSyntax(
        block_start="<minimax:tool_call>",
        block_end="</minimax:tool_call>",
        invoke_start="<invoke",
        invoke_end="</invoke>",
        name_end=">",
        parse_name=attr_name,
        param_start="<parameter",
        key_end=">",
        parse_key=attr_key,
        param_end="</parameter>",
        values=ValueRules(decode_entities=True, infer="scalars"),
    )
    needs_special_tokens = True
