"""DeepSeek V4: DSML calls inside ``<｜DSML｜tool_calls>``.

The V3.2 DSML syntax (see :mod:`turnout.plugins.tool_parsers.deepseek_v32` for the rules:
``string="true|false"`` flags, schema typing, bare JSON bodies) with a different outer block.
Only ``<｜DSML｜tool_calls>`` opens a block: a V3.2 ``<｜DSML｜function_calls>`` block is text here.
"""

from __future__ import annotations

from turnout.plugins.tool_parsers.deepseek_v32 import dsml_syntax
from turnout.tool_calls.xml_stream import XmlToolParser


class DeepSeekV4ToolParser(XmlToolParser):
    """``<｜DSML｜tool_calls><｜DSML｜invoke name=…>…`` (DeepSeek V4)."""

    syntax = dsml_syntax("tool_calls")
    needs_special_tokens = True
