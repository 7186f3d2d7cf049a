"""Step-3: ``<steptml:invoke>`` calls inside the ``<｜tool_calls_begin｜>`` block.

Format (the ``｜`` are full-width)::

    <｜tool_calls_begin｜>
    <｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">
    <steptml:parameter name="city">Paris</steptml:parameter>
    </steptml:invoke><｜tool_call_end｜>
    <｜tool_calls_end｜>

Behaviour (shared XML rules in :mod:`turnout.tool_calls.xml_stream`): several invokes per block;
the per-call tokens (``<｜tool_call_begin｜>``, ``function<｜tool_sep｜>``, ``<｜tool_call_end｜>``)
are format; an empty ``name=""`` is not a call (the text is kept); values are inline, verbatim
(``<`` and ``>`` inside values are fine) and typed by the tool's JSON schema.
"""

from __future__ import annotations

from turnout.tool_calls.xml_stream import XmlSyntax, XmlToolParser, attr_key, attr_name


class Step3ToolParser(XmlToolParser):
    """``<steptml:invoke name=…><steptml:parameter name=…>value</steptml:parameter>…`` (Step-3)."""

    syntax = XmlSyntax(
        block_start="<｜tool_calls_begin｜>",
        block_end="<｜tool_calls_end｜>",
        invoke_start="<steptml:invoke",
        invoke_end="</steptml:invoke>",
        name_end=">",
        parse_name=attr_name,
        param_start="<steptml:parameter",
        key_end=">",
        parse_key=attr_key,
        param_end="</steptml:parameter>",
        separators=(
            "<｜tool_call_begin｜>",
            "function<｜tool_sep｜>",
            "<｜tool_sep｜>",
            "<｜tool_call_end｜>",
        ),
    )
    needs_special_tokens = True
