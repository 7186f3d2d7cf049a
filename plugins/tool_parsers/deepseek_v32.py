"""DeepSeek V3.2: DSML calls inside ``<｜DSML｜function_calls>``.

Format (the ``｜`` are full-width)::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

Behaviour (shared XML rules in :mod:`turnout.tool_calls.xml_stream`):

* ``string="true"``: the value is a string, verbatim;
  ``string="false"``: JSON, guided by the tool's schema (a string-typed parameter stays a
  string); no flag: the schema decides (:mod:`turnout.tool_calls.xml_params`).
* An invoke body may instead be one bare JSON object: it becomes the arguments verbatim (a body
  that is not a JSON object makes the invoke normal text).
* Only ``<｜DSML｜function_calls>`` opens a block: a V4 ``<｜DSML｜tool_calls>`` block is text here.
"""

from __future__ import annotations

from turnout.tool_calls.xml_stream import XmlSyntax, XmlToolParser, attr_key_string, attr_name


def dsml_syntax(block: str) -> XmlSyntax:
    """DSML invokes inside ``<｜DSML｜{block}>`` (V3.2: ``function_calls``, V4: ``tool_calls``)."""
    return XmlSyntax(
        block_start=f"<｜DSML｜{block}>",
        block_end=f"</｜DSML｜{block}>",
        invoke_start="<｜DSML｜invoke",
        invoke_end="</｜DSML｜invoke>",
        name_end=">",
        parse_name=attr_name,
        param_start="<｜DSML｜parameter",
        key_end=">",
        parse_key=attr_key_string,
        param_end="</｜DSML｜parameter>",
        json_body=True,
    )


class DeepSeekV32ToolParser(XmlToolParser):
    """``<｜DSML｜function_calls><｜DSML｜invoke name=…>…`` (DeepSeek V3.2)."""

    syntax = dsml_syntax("function_calls")
    needs_special_tokens = True
