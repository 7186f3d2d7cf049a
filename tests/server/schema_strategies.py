"""Hypothesis strategies for the JSON values a JSON schema admits (the subset of JSON Schema
2020-12 that the served OpenAPI document uses), to send the router bodies made from its own
document. A keyword this module does not know is an error, so that a schema never generates
values it does not describe."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from hypothesis import strategies as st

JsonValue = Any

_ANNOTATIONS = {"title", "description", "default", "examples", "deprecated", "contentSchema"}
#: Keywords that only narrow what the others admit: values are drawn without them, then kept
#: when the whole schema admits them.
_FILTERS = {"not", "if", "then", "else", "allOf", "dependentRequired", "uniqueItems"}
_KNOWN = (
    _ANNOTATIONS
    | _FILTERS
    | {
        "$ref",
        "anyOf",
        "oneOf",
        "enum",
        "const",
        "type",
        "properties",
        "required",
        "additionalProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "contentMediaType",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    }
)
_ANY_JSON: st.SearchStrategy[JsonValue] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _is_regex(text: str) -> bool:
    try:
        re.compile(text)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


def from_schema(
    schema: dict[str, Any], root: dict[str, Any] | None = None
) -> st.SearchStrategy[JsonValue]:
    """Values ``schema`` admits; ``root`` (default ``schema``) resolves ``#/...`` references."""
    return _Builder(root if root is not None else schema).build(schema)


class _Builder:
    def __init__(self, root: dict[str, Any]) -> None:
        self._root = root
        self._refs: dict[str, st.SearchStrategy[JsonValue]] = {}

    def build(self, schema: dict[str, Any] | bool) -> st.SearchStrategy[JsonValue]:
        if schema is True:
            return _ANY_JSON
        if schema is False:
            return st.nothing()
        unknown = set(schema) - _KNOWN
        if unknown:
            raise ValueError(f"keywords not supported by this generator: {sorted(unknown)}")
        if _FILTERS.intersection(schema):
            drawn = self.build({k: v for k, v in schema.items() if k not in _FILTERS})
            validator = jsonschema.Draft202012Validator({**schema, **self._definitions()})
            return drawn.filter(validator.is_valid)
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        if "const" in schema:
            return st.just(schema["const"])
        if "enum" in schema:
            return st.sampled_from(schema["enum"])
        branches = schema.get("anyOf", schema.get("oneOf"))
        if branches is not None:
            return st.one_of([self.build(branch) for branch in branches])
        kinds = schema.get("type")
        if kinds is None:
            return _ANY_JSON
        if isinstance(kinds, list):
            return st.one_of([self.build({**schema, "type": kind}) for kind in kinds])
        return self._typed(kinds, schema)

    def _definitions(self) -> dict[str, Any]:
        """The root's parts that references point into (for validating a sub-schema)."""
        return {key: value for key, value in self._root.items() if key in ("components", "$defs")}

    def _ref(self, ref: str) -> st.SearchStrategy[JsonValue]:
        if ref not in self._refs:
            node: Any = self._root
            for part in ref.removeprefix("#/").split("/"):
                node = node[part]
            self._refs[ref] = st.deferred(lambda: self.build(node))
        return self._refs[ref]

    def _typed(self, kind: str, schema: dict[str, Any]) -> st.SearchStrategy[JsonValue]:
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind == "string":
            if schema.get("contentMediaType") == "application/json":
                # JSON text of a value the content schema admits.
                return self.build(schema.get("contentSchema", True)).map(json.dumps)
            if schema.get("format") == "regex":
                return st.text(min_size=schema.get("minLength", 0), max_size=12).filter(_is_regex)
            if "pattern" in schema:
                return st.from_regex(schema["pattern"], fullmatch=True).filter(
                    lambda s: schema.get("minLength", 0) <= len(s) <= schema.get("maxLength", 10**9)
                )
            return st.text(
                min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", 12)
            )
        if kind == "integer":
            low = schema.get("minimum")
            high = schema.get("maximum")
            if "exclusiveMinimum" in schema:
                low = schema["exclusiveMinimum"] + 1
            if "exclusiveMaximum" in schema:
                high = schema["exclusiveMaximum"] - 1
            return st.integers(min_value=low, max_value=high)
        if kind == "number":
            return st.floats(
                min_value=schema.get("minimum", schema.get("exclusiveMinimum")),
                max_value=schema.get("maximum", schema.get("exclusiveMaximum")),
                exclude_min="exclusiveMinimum" in schema,
                exclude_max="exclusiveMaximum" in schema,
                allow_nan=False,
                allow_infinity=False,
            )
        if kind == "array":
            return st.lists(
                self.build(schema.get("items", True)),
                min_size=schema.get("minItems", 0),
                max_size=schema.get("maxItems", max(schema.get("minItems", 0), 4)),
            )
        if kind == "object":
            return self._object(schema)
        raise ValueError(f"unknown type {kind!r}")

    def _object(self, schema: dict[str, Any]) -> st.SearchStrategy[JsonValue]:
        properties: dict[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        extra = schema.get("additionalProperties", True)
        low = schema.get("minProperties", 0)
        high = schema.get("maxProperties", 10**9)
        fixed = st.fixed_dictionaries(
            {name: self.build(properties.get(name, True)) for name in sorted(required)},
            optional={
                name: self.build(s) for name, s in properties.items() if name not in required
            },
        )
        if extra is False:
            objects = fixed
        else:
            # Keys the schema does not name, with the values it admits for them.
            names = self.build(
                {"type": "string", "maxLength": 8, **schema.get("propertyNames", {})}
            )
            others = st.dictionaries(
                names.filter(lambda name: name not in properties), self.build(extra), max_size=2
            )
            objects = st.builds(lambda known, more: {**more, **known}, fixed, others)
        if "minProperties" in schema or "maxProperties" in schema:
            return objects.filter(lambda value: low <= len(value) <= high)
        return objects
