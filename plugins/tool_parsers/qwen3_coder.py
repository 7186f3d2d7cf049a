"""Qwen3-Coder (also Qwen3.5/3.6, Nemotron-3): XML parameters inside ``<tool_call>``.

Format::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Behaviour (shared XML rules in :mod:`turnout.tool_calls.xml_stream`):

* Values are trimmed at both ends, as SGLang and smg do (a whitespace-only value is ``""``);
  nothing else changes (no HTML un-escaping: ``&amp;`` stays, as Qwen's own API does). Values
  are typed by the tool's JSON schema (:mod:`turnout.tool_calls.xml_params`).
* A forgotten ``</parameter>`` is tolerated: the value then ends at the next ``<parameter=``,
  ``</function>`` or ``</tool_call>``; a forgotten ``</function>`` too (the block end closes
  the call).
* A call is released at ``</function>`` (or ``</tool_call>``). One still open when the output
  ends is normal text, unless the output was cut off by ``max_tokens``: then it is released
  with the parameters received so far.
* ``<tool_call>`` not followed by ``<function=NAME>`` is prose and stays in the text.
"""

from __future__ import annotations

from turnout.tool_calls.xml_params import ValueRules
from turnout.tool_calls.xml_stream import (
    PLAIN_NAME_PREFIX,
    XmlSyntax,
    XmlToolParser,
    plain_key,
    plain_name,
)


def coder_syntax(block_start: str, block_end: str, values: ValueRules) -> XmlSyntax:
    """``<function=NAME><parameter=KEY>`` inside the given block (Qwen3-Coder, Seed-OSS)."""
    return XmlSyntax(
        block_start=block_start,
        block_end=block_end,
        invoke_start="<function=",
        invoke_end="</function>",
        name_end=">",
        parse_name=plain_name,
        name_prefix=PLAIN_NAME_PREFIX,
        param_start="<parameter=",
        key_end=">",
        parse_key=plain_key,
        param_end="</parameter>",
        value_ends=("<parameter=", "</function>", block_end),
        values=values,
    )


class Qwen3CoderToolParser(XmlToolParser):
    """``<tool_call><function=NAME><parameter=KEY>value</parameter>…`` (Qwen3-Coder)."""

    syntax = coder_syntax("<tool_call>", "</tool_call>", ValueRules(trim="strip"))
