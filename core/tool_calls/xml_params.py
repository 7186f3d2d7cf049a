"""XML / key-value tool-call parameters to JSON arguments, guided by the tool's JSON schema.

Formats such as Qwen3-Coder, GLM, MiniMax, Step-3, Seed-OSS and DeepSeek DSML write every
parameter as raw text (``<parameter=city>Paris</parameter>``); the client needs JSON. This module
turns one raw value into JSON text and collects the schemas of a request's tools.

Rules (the same for every XML-family parser):

Each format picks its :class:`ValueRules`:

* **Whitespace** (``trim``). ``"strip"`` (Qwen3-Coder, as SGLang and smg do): values are trimmed
  at both ends, a whitespace-only value is ``""``. ``"newline"`` (Seed-OSS): exactly one ``\\n``
  right after the opening tag and one right before the closing tag are format, not value
  (:func:`trim_value`). ``"none"`` (inline formats): the value is verbatim. Typed (non-string)
  values ignore surrounding whitespace in every case.
* **Entities** (``decode_entities``, MiniMax): ``&lt; &gt; &amp; &quot; &apos;`` and numeric
  character references are decoded once (:func:`decode_entities`); other formats keep them.
* **Strings stay verbatim.** A parameter whose schema type is ``string`` becomes a JSON string of
  the raw text, even when it looks numeric (``"3"``).
* **Typed parameters** (``integer``, ``number``, ``boolean``, ``object``, ``array``, ``null``):
  the value is parsed as strict JSON (no ``NaN``/``Infinity``) and its text is kept verbatim, so
  numbers and key order never change; Python spellings ``True``/``False``/``None`` and Python
  dict/list literals (single quotes) are accepted and re-emitted as JSON; a boolean given as
  ``0``/``1`` or an integer given as ``3.0`` is converted. A value that cannot be read as the
  declared type falls back to a JSON string of the raw text (nothing is dropped).
* **No schema** (unknown tool, unknown parameter, no ``type``): with ``infer="json"`` a JSON
  literal if the text is one, Python ``True``/``False``/``None`` and dict/list literals
  accepted, else a string; with ``infer="scalars"`` (MiniMax, as smg does) only numbers,
  booleans and null are inferred and JSON-looking objects, arrays and quoted strings stay
  strings.
* **Escaped JSON** (``unescape_json``, GLM, as SGLang accepts): an object or array written with
  backslash-escaped quotes (``[{\\"a\\": 1}]``), invalid as it stands, is read after undoing
  its escapes once, when the parameter may be an object or array.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from turnout.tool_calls.types import Tools

#: JSON schema of one parameter (``{"type": "integer"}``); ``None`` when unknown.
ParamSchema = Mapping[str, Any] | None
#: Parameter name -> schema, for one function.
FunctionSchemas = Mapping[str, ParamSchema]

_PY_CONSTANTS = {"True": "true", "False": "false", "None": "null"}
_TYPE_CHECKS: dict[str, type | tuple[type, ...]] = {
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "object": dict,
    "array": list,
}


@dataclass(frozen=True, slots=True)
class ValueRules:
    """How one format writes parameter values (see the module docstring)."""

    trim: Literal["none", "newline", "strip"] = "none"
    decode_entities: bool = False
    infer: Literal["json", "scalars"] = "json"
    unescape_json: bool = False


#: Values written verbatim (the inline formats).
VERBATIM = ValueRules()


def trim_value(raw: str) -> str:
    """Drop one ``\\n`` right after the opening tag and one right before the closing tag."""
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    return raw


_ENTITY = re.compile(r"&(lt|gt|amp|quot|apos|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
_NAMED_ENTITIES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}


def _entity(match: re.Match[str]) -> str:
    name = match.group(1)
    named = _NAMED_ENTITIES.get(name)
    if named is not None:
        return named
    code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
    if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
        return chr(code)
    return match.group(0)


def decode_entities(raw: str) -> str:
    """Decode the XML entities and numeric character references in ``raw`` (once)."""
    return _ENTITY.sub(_entity, raw) if "&" in raw else raw


def _trim(raw: str, rules: ValueRules) -> str:
    if rules.trim == "strip":
        return raw.strip()
    if rules.trim == "newline":
        return trim_value(raw)
    return raw


def param_json(raw: str, schema: ParamSchema, is_string: bool | None, rules: ValueRules) -> str:
    """JSON text for one raw parameter value of a format with ``rules``.

    ``is_string`` is the format's own flag (DSML ``string="true|false"``); ``None`` lets the
    schema decide.
    """
    raw = _trim(raw, rules)
    if rules.decode_entities:
        raw = decode_entities(raw)
    if is_string:
        return string_json(raw)
    return value_json(raw, schema, infer=rules.infer, unescape_json=rules.unescape_json)


def partial_param_json(
    raw: str, schema: ParamSchema, is_string: bool | None, rules: ValueRules
) -> str:
    """The start of a value cut off by the end of output, as received: a string parameter (or
    one of unknown type) as an unterminated JSON string, a typed one as its raw text."""
    if rules.trim == "strip":
        raw = raw.lstrip()
    elif rules.trim == "newline":
        raw = raw.removeprefix("\n")
    if rules.decode_entities:
        raw = decode_entities(raw)
    typed = is_string is False or (
        is_string is None and schema_types(schema) not in (None, frozenset({"string"}))
    )
    return raw.lstrip() if typed else string_json(raw)[:-1]


def _field(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def function_schemas(tools: Tools) -> dict[str, dict[str, ParamSchema]]:
    """Map each tool's function name to its parameters' schemas (malformed entries skipped).

    Accepts the OpenAI shape ``{"type": "function", "function": {...}}`` (mappings or objects
    with the same attributes) and the flat ``{"name": ..., "parameters": ...}`` shape.
    """
    out: dict[str, dict[str, ParamSchema]] = {}
    for tool in tools or ():
        function = _field(tool, "function")
        if function is None:
            function = tool
        name = _field(function, "name")
        if not isinstance(name, str):
            continue
        params = _field(function, "parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        schemas: dict[str, ParamSchema] = {}
        if isinstance(props, Mapping):
            for key, schema in props.items():
                if isinstance(key, str):
                    schemas[key] = schema if isinstance(schema, Mapping) else None
        out.setdefault(name, schemas)
    return out


def schema_types(schema: ParamSchema) -> frozenset[str] | None:
    """JSON types a schema allows (``type``, type lists, ``anyOf``/``oneOf``, ``enum``, ``const``).

    ``None`` means "unknown": infer from the text.
    """
    if schema is None:
        return None
    found: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        found.add(declared)
    elif isinstance(declared, Sequence):
        found.update(t for t in declared if isinstance(t, str))
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        if isinstance(branches, Sequence) and not isinstance(branches, str):
            for branch in branches:
                sub = schema_types(branch) if isinstance(branch, Mapping) else None
                if sub is None:
                    return None
                found.update(sub)
    values = list(schema.get("enum") or ()) if isinstance(schema.get("enum"), list) else []
    if "const" in schema:
        values.append(schema["const"])
    for value in values:
        found.add(_json_type(value))
    if not found:
        return None
    if "number" in found:
        found.add("integer")
    return frozenset(found)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def strict_json(text: str) -> tuple[bool, Any]:
    """Parse ``text`` as strict JSON (no NaN/Infinity); ``(False, None)`` when it is not."""
    try:
        return True, json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return False, None


def _python_literal(text: str) -> str | None:
    """JSON for a Python constant or a dict/list literal, or ``None``."""
    constant = _PY_CONSTANTS.get(text)
    if constant is not None:
        return constant
    if not text or text[0] not in "{[":
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict | list):
        return None
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None


_STRING_ENCODER = json.JSONEncoder(ensure_ascii=False)


def string_json(raw: str) -> str:
    """The JSON string literal for ``raw`` (non-ASCII kept as is)."""
    return _STRING_ENCODER.encode(raw)


def value_json(
    raw: str,
    schema: ParamSchema,
    *,
    infer: Literal["json", "scalars"] = "json",
    unescape_json: bool = False,
) -> str:
    """JSON text for one parameter value (already trimmed; see :class:`ValueRules` for the
    keyword options)."""
    types = schema_types(schema)
    text = raw.strip()
    if types is not None and "string" in types:
        if "null" in types and text == "null":
            return "null"
        return string_json(raw)
    if types is None and infer == "scalars":
        return _scalar_json(raw, text)
    ok, value = strict_json(text)
    if not ok and unescape_json:
        ok, value, text = _unescaped_container(text, types)
    if ok:
        if types is None or any(_fits(value, t) for t in types):
            return text
        if "boolean" in types and value in (0, 1) and not isinstance(value, bool):
            return "true" if value else "false"
        if "integer" in types and isinstance(value, float) and value.is_integer():
            return str(int(value))
        return text
    literal = _python_literal(text)
    if literal is not None:
        return literal
    if types is not None and "boolean" in types and text.lower() in ("true", "false"):
        return text.lower()
    return string_json(raw)


def _scalar_json(raw: str, text: str) -> str:
    """No schema, ``infer="scalars"``: a number, boolean or null, else the raw string."""
    constant = _PY_CONSTANTS.get(text)
    if constant is not None:
        return constant
    if text[:1] not in ("{", "[", '"'):
        ok, value = strict_json(text)
        if ok and not isinstance(value, str):
            return text
    return string_json(raw)


def _unescaped_container(text: str, types: frozenset[str] | None) -> tuple[bool, Any, str]:
    """``[{\\"a\\": 1}]`` read once its backslash escapes are undone, if the parameter may be
    an object or array and the result is one; else ``(False, None, text)``."""
    if text[:1] not in ("{", "[") or (types is not None and not types & {"object", "array"}):
        return False, None, text
    try:
        inner = json.loads(f'"{text}"', strict=False)
    except (ValueError, RecursionError):
        return False, None, text
    ok, value = strict_json(inner)
    if ok and isinstance(value, dict | list):
        return True, value, inner.strip()
    return False, None, text


def _fits(value: object, json_type: str) -> bool:
    if json_type == "null":
        return value is None
    check = _TYPE_CHECKS.get(json_type)
    if check is None:
        return False
    if isinstance(value, bool) and json_type != "boolean":
        return False
    return isinstance(value, check)


def is_string_param(schema: ParamSchema) -> bool:
    """True when the value is certainly a JSON string (the schema allows nothing else)."""
    types = schema_types(schema)
    return types is not None and types <= {"string"}
