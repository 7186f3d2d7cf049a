"""Seed-OSS: Qwen3-Coder-style XML parameters inside ``<seed:tool_call>``.

Format::

    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    </function>
    </seed:tool_call>

Same rules as :mod:`turnout.plugins.tool_parsers.qwen3_coder`, except whitespace: only one line
break after the opening and one before the closing parameter tag are format. A
``<seed:think>…</seed:think>`` region is reasoning that no reasoning parser removed: it stays in
the normal text verbatim and a call quoted inside it is not a call.
"""

from __future__ import annotations

from dataclasses import replace

from turnout.plugins.tool_parsers.qwen3_coder import coder_syntax
from turnout.tool_calls.xml_params import ValueRules
from turnout.tool_calls.xml_stream import XmlToolParser


class SeedOssToolParser(XmlToolParser):
    """``<seed:tool_call><function=NAME><parameter=KEY>value</parameter>…`` (Seed-OSS)."""

    syntax = replace(
        coder_syntax("<seed:tool_call>", "</seed:tool_call>", ValueRules(trim="newline")),
        opaque=(("<seed:think>", "</seed:think>"),),
    )
    needs_special_tokens = True
