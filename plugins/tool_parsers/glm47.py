"""GLM-4.7 / GLM-5: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>``.

The GLM-4.5 tags without line breaks between them. The parser is the GLM-4.5 one (see
:mod:`turnout.plugins.tool_parsers.glm45` for the rules): whitespace between tags is optional in
both, so either parser reads either layout; values are kept verbatim and typed by schema.
"""

from __future__ import annotations

from turnout.plugins.tool_parsers.glm45 import GLM_SYNTAX
from turnout.tool_calls.xml_stream import XmlToolParser


class Glm47ToolParser(XmlToolParser):
    """``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`` (GLM-4.7/5)."""

    syntax = GLM_SYNTAX
    needs_special_tokens = True
