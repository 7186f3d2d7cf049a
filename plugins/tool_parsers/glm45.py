"""GLM-4.5 / GLM-4.6: ``<tool_call>NAME`` then ``<arg_key>``/``<arg_value>`` pairs.

Format (one call per block, each part on its own line)::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

Behaviour (shared XML rules in :mod:`turnout.tool_calls.xml_stream`):

* The name runs from ``<tool_call>`` to the first ``<arg_key>`` (or ``</tool_call>`` for a call
  without arguments); whitespace around it is ignored, whitespace inside it means the
  ``<tool_call>`` was prose (the text is kept).
* Models sometimes write the line breaks escaped, as the two characters ``\\n``
  (``<tool_call>f\\n<arg_key>k</arg_key>\\n<arg_value>v</arg_value>\\n</tool_call>``): between
  tags and after the name they count as line breaks, as SGLang accepts.
* Values are inline and kept verbatim (backslashes and escaped quotes included, never
  double-escaped); they are typed by the tool's JSON schema (:mod:`turnout.tool_calls.xml_params`):
  without a schema a value that is JSON (``{"a": 1}``, ``5``, ``true``) is JSON. An object or
  array written with escaped quotes (``[{\\"id\\": \\"1\\"}]``), invalid as it stands, is read
  after undoing its escapes once (string parameters stay verbatim).
* An ``<arg_key>`` without its ``<arg_value>`` is dropped. A call is released at
  ``</tool_call>``; one still open when the output ends is normal text (unless the output was
  cut off by ``max_tokens``: then it is released with the arguments received so far).

GLM-4.7 / GLM-5 write the same tags without the line breaks; both parsers accept both layouts.
"""

from __future__ import annotations

import re

from turnout.tool_calls.xml_params import ValueRules
from turnout.tool_calls.xml_stream import (
    PLAIN_NAME_PREFIX,
    XmlSyntax,
    XmlToolParser,
    plain_key,
    plain_name,
)

_ESCAPED_BREAKS = re.compile(r"\A(?:\s|\\n)+|(?:\s|\\n)+\Z")


def glm_name(header: str) -> str | None:
    """The function name after ``<tool_call>``; escaped line breaks around it are ignored."""
    return plain_name(_ESCAPED_BREAKS.sub("", header))


GLM_SYNTAX = XmlSyntax(
    block_start="<tool_call>",
    block_end="</tool_call>",
    invoke_start=None,
    invoke_end=None,
    name_end=None,
    name_lookahead=("<arg_key>", "</tool_call>"),
    parse_name=glm_name,
    name_prefix=PLAIN_NAME_PREFIX,
    param_start="<arg_key>",
    key_end="</arg_key>",
    parse_key=plain_key,
    value_start="<arg_value>",
    param_end="</arg_value>",
    values=ValueRules(unescape_json=True),
    escaped_newlines=True,
)


class Glm45ToolParser(XmlToolParser):
    """``<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>…`` (GLM-4.5/4.6)."""

    syntax = GLM_SYNTAX
    needs_special_tokens = True
