"""Building blocks of the JSON schemas that the OpenAPI document adds to what the route types
give: :mod:`turnout.server.openapi_answers` (the answers) and
:mod:`turnout.server.openapi_requests` (the rules of the request bodies) are written with them.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

_REF = "#/components/schemas/{name}"


def ref(name: str) -> Schema:
    """A reference to the component ``name``."""
    return {"$ref": _REF.format(name=name)}


def nullable(schema: Schema) -> Schema:
    """``schema`` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def obj(properties: dict[str, Schema], *required: str, closed: bool = False) -> Schema:
    """An object with ``properties``, the ``required`` ones always there (``closed``: no
    others)."""
    found: Schema = {"type": "object", "properties": properties, "required": list(required)}
    if closed:
        found["additionalProperties"] = False
    return found


STR: Schema = {"type": "string"}
TEXT: Schema = {"type": "string", "minLength": 1}
INT: Schema = {"type": "integer"}
COUNT: Schema = {"type": "integer", "minimum": 0}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
NULL: Schema = {"type": "null"}
JSON_SCHEMA: Schema = {"type": "object", "description": "A JSON schema"}
STRING_MAP: Schema = {"type": "object", "additionalProperties": STR}
#: One tool call of a chat message (OpenAI's shape), in answers and in requests.
TOOL_CALL = obj(
    {
        "id": STR,
        "type": {"const": "function"},
        "function": obj({"name": STR, "arguments": STR}, "name", "arguments"),
    },
    "id",
    "type",
    "function",
)
