"""``turnout.tool_calls.xml_params``: raw XML parameter values to JSON, guided by the schema."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from turnout.tool_calls.xml_params import (
    VERBATIM,
    ValueRules,
    decode_entities,
    function_schemas,
    is_string_param,
    param_json,
    partial_param_json,
    schema_types,
    strict_json,
    trim_value,
    value_json,
)

S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741
N = {"type": "number"}
B = {"type": "boolean"}
O = {"type": "object"}  # noqa: E741
A = {"type": "array"}


@pytest.mark.parametrize(
    ("raw", "schema", "expected"),
    [
        # string stays string, verbatim, even when it looks like something else
        ("3", S, '"3"'),
        ("true", S, '"true"'),
        ('{"a": 1}', S, '"{\\"a\\": 1}"'),
        ("  spaced  ", S, '"  spaced  "'),
        ("a &amp; b &lt;c&gt;", S, '"a &amp; b &lt;c&gt;"'),
        ("C:\\Users\\n", S, '"C:\\\\Users\\\\n"'),
        ("中文 🙂", S, '"中文 🙂"'),
        # typed values keep the model's JSON text verbatim
        ("42", I, "42"),
        (" 42\n", I, "42"),
        ("1.50", N, "1.50"),
        ("7", N, "7"),
        ("1e999", N, "1e999"),
        ("true", B, "true"),
        ("True", B, "true"),
        ("FALSE", B, "false"),
        ("1", B, "true"),
        ("3.0", I, "3"),
        ('{"b": 2, "a": 1.0}', O, '{"b": 2, "a": 1.0}'),
        ("{'a': True, 'b': None}", O, '{"a": true, "b": null}'),
        ("[1, 'x']", A, '[1, "x"]'),
        ("None", O, "null"),
        # a value that is not the declared type falls back to a string, nothing dropped
        ("forty-two", I, '"forty-two"'),
        ("NaN", N, '"NaN"'),
        ("Infinity", N, '"Infinity"'),
        ("{broken", O, '"{broken"'),
        # no schema: JSON literal if it is one, Python constants, else a string
        ("5", None, "5"),
        ("-0.5", None, "-0.5"),
        ("null", None, "null"),
        ("None", None, "null"),
        ("False", None, "false"),
        ('{"x": [1, 2]}', None, '{"x": [1, 2]}'),
        ("{'x': (1, 2)}", None, '{"x": [1, 2]}'),
        ("Paris", None, '"Paris"'),
        ("'quoted'", None, "\"'quoted'\""),
        ("007", None, '"007"'),
        ("", None, '""'),
        ("   ", None, '"   "'),
        ("{1, 2}", None, '"{1, 2}"'),  # a Python set is not JSON
        ("[b'x']", None, "\"[b'x']\""),
        # unions
        ("null", {"type": ["string", "null"]}, "null"),
        ("5", {"type": ["string", "null"]}, '"5"'),
        ("5", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "5"),
        ("x", {"enum": ["x", "y"]}, '"x"'),
        ("2", {"enum": [1, 2]}, "2"),
        ("2", {"description": "no type"}, "2"),
    ],
)
def test_value_json(raw: str, schema: dict[str, Any] | None, expected: str) -> None:
    out = value_json(raw, schema)
    assert out == expected
    json.loads(out)  # always valid JSON


def test_huge_and_deep_values_do_not_raise() -> None:
    assert value_json("9" * 10_000, None) == json.dumps("9" * 10_000)  # int digit limit
    deep = "[" * 100_000 + "]" * 100_000
    assert json.loads(value_json(deep, None)) == deep
    assert json.loads(value_json("{" * 5000, O)) == "{" * 5000


def test_trim_value_removes_one_line_break_each_side() -> None:
    assert trim_value("\nabc\n") == "abc"
    assert trim_value("\n\nabc\n\n") == "\nabc\n"
    assert trim_value("\r\n  indented\r\n") == "\r\n  indented\r"
    assert trim_value("x\r") == "x\r"
    assert trim_value("\n") == ""
    assert trim_value("") == ""


def test_function_schemas_accepts_both_shapes_and_skips_junk() -> None:
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"a": I, "b": "junk"}},
            },
        },
        {"name": "flat", "parameters": {"properties": {"x": S}}},
        SimpleNamespace(function=SimpleNamespace(name="obj", parameters={"properties": {"y": B}})),
        {"type": "function", "function": {"name": "noparams"}},
        {"type": "function", "function": {"parameters": {}}},
        "junk",
    ]
    assert function_schemas(tools) == {
        "f": {"a": I, "b": None},
        "flat": {"x": S},
        "obj": {"y": B},
        "noparams": {},
    }
    assert function_schemas(None) == {}


def test_schema_types() -> None:
    assert schema_types(None) is None
    assert schema_types({}) is None
    assert schema_types(N) == {"number", "integer"}
    assert schema_types({"oneOf": [S, {"type": "null"}]}) == {"string", "null"}
    assert schema_types({"anyOf": [S, {}]}) is None  # an open branch: infer
    assert schema_types({"const": True}) == {"boolean"}
    assert is_string_param(S)
    assert is_string_param({"enum": ["a", "b"]})
    assert not is_string_param({"type": ["string", "null"]})
    assert not is_string_param(None)


def test_strict_json_rejects_non_json_constants() -> None:
    assert strict_json("NaN") == (False, None)
    assert strict_json("[Infinity]") == (False, None)
    assert strict_json('{"a": 1}') == (True, {"a": 1})


STRIP = ValueRules(trim="strip")
NEWLINE = ValueRules(trim="newline")
MINIMAX = ValueRules(decode_entities=True, infer="scalars")
GLM = ValueRules(unescape_json=True)


@pytest.mark.parametrize(
    ("raw", "schema", "flag", "rules", "expected"),
    [
        # trimming: both ends (Qwen3-Coder), one line break each side (Seed-OSS), none
        ("\n  Paris \t\n", S, None, STRIP, '"Paris"'),
        (" \n\t ", S, None, STRIP, '""'),
        ("\n  Paris \n\n", S, None, NEWLINE, '"  Paris \\n"'),
        ("\n x \n", S, None, VERBATIM, '"\\n x \\n"'),
        (" 7 ", I, None, STRIP, "7"),
        # the format's own string flag (DSML) wins over inference
        ("5", None, True, VERBATIM, '"5"'),
        ("5", None, False, VERBATIM, "5"),
        # entities decoded once (MiniMax), also before typing
        ("a &amp;lt; b &#60;&#x3e; &quot;&apos;", S, None, MINIMAX, '"a &lt; b <> \\"\'"'),
        ("&#1114112; &#xD800; &nbsp;", S, None, MINIMAX, '"&#1114112; &#xD800; &nbsp;"'),
        ("[&quot;x&quot;]", A, None, MINIMAX, '["x"]'),
        # MiniMax without a schema: scalars inferred, JSON-looking containers stay strings
        ('{"a": 1}', None, None, MINIMAX, '"{\\"a\\": 1}"'),
        ("[1]", None, None, MINIMAX, '"[1]"'),
        ('"q"', None, None, MINIMAX, '"\\"q\\""'),
        ("-2.5", None, None, MINIMAX, "-2.5"),
        ("True", None, None, MINIMAX, "true"),
        ("007", None, None, MINIMAX, '"007"'),
        # GLM: backslash-escaped objects/arrays are read once unescaped (not strings)
        ('[{\\"a\\": \\"C:\\\\\\\\x\\"}]', A, None, GLM, '[{"a": "C:\\\\x"}]'),
        ('{\\"a\\": 1}', None, None, GLM, '{"a": 1}'),
        ('{\\"a\\": 1}', S, None, GLM, '"{\\\\\\"a\\\\\\": 1}"'),
        ('{\\"a\\": 1}', I, None, GLM, '"{\\\\\\"a\\\\\\": 1}"'),
        ('\\"x\\"', None, None, GLM, '"\\\\\\"x\\\\\\""'),
        ('{\\"a\\": 1}', None, None, VERBATIM, '"{\\\\\\"a\\\\\\": 1}"'),
    ],
)
def test_param_json_rules(
    raw: str, schema: dict[str, Any] | None, flag: bool | None, rules: ValueRules, expected: str
) -> None:
    out = param_json(raw, schema, flag, rules)
    assert out == expected
    json.loads(out)


def test_partial_values_are_taken_as_received() -> None:
    assert partial_param_json("\n  Par", S, None, STRIP) == '"Par'
    assert partial_param_json("\nPar\n", None, None, NEWLINE) == '"Par\\n'
    assert partial_param_json(" 12", I, None, VERBATIM) == "12"
    assert partial_param_json("1", None, False, VERBATIM) == "1"
    assert partial_param_json("a &amp", S, None, MINIMAX) == '"a &amp'
    assert decode_entities("no entities") == "no entities"
