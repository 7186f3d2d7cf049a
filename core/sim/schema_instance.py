"""Build a small JSON value that satisfies a JSON schema (what the simulator answers under a
``json_schema`` constraint).

Covers the schema shapes routers send: objects with properties, arrays, scalars with
``enum``/``const``/bounds, ``anyOf``/``oneOf``/``allOf`` and local ``$ref``s. Every listed property
is filled in, and an array gets at least one item when it may, so the tool-call shape
``array of {name, parameters}`` comes out as a call of the first allowed tool with arguments.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SchemaError", "conforms", "instance_for"]

_MAX_DEPTH = 12


class SchemaError(ValueError):
    """The schema is not something the simulator can satisfy (not an object, bad ``$ref``)."""


def instance_for(schema: Any) -> Any:
    """A value valid under ``schema`` (a parsed JSON schema document)."""
    if schema is True or schema == {}:
        return {}
    if not isinstance(schema, dict):
        raise SchemaError(f"a JSON schema must be an object, got {type(schema).__name__}")
    return _Builder(schema).build(schema, 0)


def conforms(value: Any, schema: Any) -> bool:
    """Whether ``value`` is valid under ``schema``, for the keywords :func:`instance_for`
    covers (types, properties and ``required``, items and their count, ``enum``/``const``,
    ``anyOf``/``oneOf``/``allOf`` and local ``$ref``s; string and number bounds are not
    checked)."""
    if schema is True or schema == {}:
        return True
    if not isinstance(schema, dict):
        return False
    try:
        return _Builder(schema).holds(value, schema, 0)
    except SchemaError:
        return False


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


class _Builder:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaError(f"only local $refs are supported, got {ref!r}")
        node: Any = self.root
        for part in ref.lstrip("#").strip("/").split("/"):
            if not part:
                continue
            key = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or key not in node:
                raise SchemaError(f"$ref {ref!r} does not resolve")
            node = node[key]
        return node

    def build(self, schema: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise SchemaError("schema nests too deeply (recursive $ref?)")
        if schema is True or not isinstance(schema, dict):
            return {}
        if "$ref" in schema:
            return self.build(self.resolve(str(schema["$ref"])), depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                base = {k: v for k, v in schema.items() if k != key}
                return self.build(_merge(base, schema[key][0]), depth + 1)
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged = _merge(merged, part if isinstance(part, dict) else {})
            return self.build(merged, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = _infer_type(schema)
        return self.by_type(str(kind), schema, depth)

    def holds(self, value: Any, schema: Any, depth: int) -> bool:
        if depth > _MAX_DEPTH:
            raise SchemaError("schema nests too deeply (recursive $ref?)")
        if schema is True or not isinstance(schema, dict):
            return schema is not False
        if "$ref" in schema:
            return self.holds(value, self.resolve(str(schema["$ref"])), depth + 1)
        if "const" in schema and value != schema["const"]:
            return False
        if isinstance(schema.get("enum"), list) and value not in schema["enum"]:
            return False
        for key, needed in (("anyOf", 1), ("oneOf", 1)):
            options = schema.get(key)
            if isinstance(options, list):
                matches = sum(self.holds(value, option, depth + 1) for option in options)
                if matches < needed or (key == "oneOf" and matches > 1):
                    return False
        parts = schema.get("allOf")
        if isinstance(parts, list) and not all(self.holds(value, p, depth + 1) for p in parts):
            return False
        kinds = schema.get("type")
        if kinds is not None:
            names = kinds if isinstance(kinds, list) else [kinds]
            if not any(_is(value, str(name)) for name in names):
                return False
        if isinstance(value, dict):
            return self._object_holds(value, schema, depth)
        if isinstance(value, list):
            return self._array_holds(value, schema, depth)
        return True

    def _object_holds(self, value: dict[str, Any], schema: dict[str, Any], depth: int) -> bool:
        if any(name not in value for name in schema.get("required", []) or []):
            return False
        props = schema.get("properties")
        props = props if isinstance(props, dict) else {}
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            sub = props.get(name, extra)
            if not self.holds(item, sub, depth + 1):
                return False
        return True

    def _array_holds(self, value: list[Any], schema: dict[str, Any], depth: int) -> bool:
        if len(value) < int(schema.get("minItems", 0) or 0):
            return False
        most = schema.get("maxItems")
        if isinstance(most, int) and len(value) > most:
            return False
        items = schema.get("items", True)
        return all(self.holds(item, items, depth + 1) for item in value)

    def by_type(self, kind: str, schema: dict[str, Any], depth: int) -> Any:
        if kind == "object":
            props = schema.get("properties")
            out: dict[str, Any] = {}
            if isinstance(props, dict):
                for name, sub in props.items():
                    out[name] = self.build(sub, depth + 1)
            for name in schema.get("required", []) or []:
                if name not in out:
                    out[name] = {}
            return out
        if kind == "array":
            items = schema.get("items")
            if isinstance(schema.get("prefixItems"), list):
                return [self.build(s, depth + 1) for s in schema["prefixItems"]]
            max_items = schema.get("maxItems")
            count = int(schema.get("minItems", 0) or 0)
            if count == 0 and items not in (None, False) and max_items != 0:
                count = 1
            return [self.build(items, depth + 1) for _ in range(count)]
        if kind == "string":
            return "a" * int(schema.get("minLength", 0) or 0)
        if kind in ("integer", "number"):
            return _number(schema, integer=kind == "integer")
        if kind == "boolean":
            return False
        if kind == "null":
            return None
        raise SchemaError(f"unknown JSON schema type {kind!r}")


def _is(value: Any, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _infer_type(schema: dict[str, Any]) -> str:
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "object"


def _merge(base: dict[str, Any], extra: Any) -> dict[str, Any]:
    if not isinstance(extra, dict):
        return base
    merged = {**base, **extra}
    if isinstance(base.get("properties"), dict) and isinstance(extra.get("properties"), dict):
        merged["properties"] = {**base["properties"], **extra["properties"]}
    if isinstance(base.get("required"), list) and isinstance(extra.get("required"), list):
        merged["required"] = list(dict.fromkeys(base["required"] + extra["required"]))
    return merged


def _number(schema: dict[str, Any], *, integer: bool) -> int | float:
    low = schema.get("minimum")
    exclusive = schema.get("exclusiveMinimum")
    value: float = 0
    if isinstance(low, int | float):
        value = low
    if isinstance(exclusive, int | float) and value <= exclusive:
        value = exclusive + (1 if integer else 0.5)
    high = schema.get("maximum")
    if isinstance(high, int | float) and value > high:
        value = high
    multiple = schema.get("multipleOf")
    if isinstance(multiple, int | float) and multiple > 0:
        value = math.ceil(value / multiple) * multiple
    return math.ceil(value) if integer else value
