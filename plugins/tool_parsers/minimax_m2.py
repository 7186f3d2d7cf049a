"""MiniMax-M2: ``<invoke>`` calls inside ``<minimax:tool_call>``.

Format (several invokes may share one block)::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>

Behaviour (shared XML rules in :mod:`turnout.tool_calls.xml_stream`): values are inline and
verbatim — MiniMax's chat template writes values raw, so ``&lt;`` is not decoded (smg decodes
entities; a model that writes ``&amp;`` means ``&amp;``); they are typed by the tool's JSON
schema, and without a schema a JSON object/array value becomes JSON. An ``<invoke>`` without a
name is not a call; a call cut off after its name is kept with the parameters seen so far.
"""

from __future__ import annotations

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
    )
    needs_special_tokens = True
