"""Pieces of the simulator without a server: schema instances, scripts, planning, knobs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from turnout import demo_model
from turnout.sim import ModelFiles, Script, ScriptError, SimKnobs, SimModel
from turnout.sim.model import InvalidRequest
from turnout.sim.ranks import Rank, Running
from turnout.sim.records import SimRecords
from turnout.sim.schema_instance import SchemaError, conforms, instance_for
from turnout.sim.structural_tag import structural_answer
from turnout.wire.proto import sglang_scheduler_pb2 as pb

from ..wire._helpers import request, token_id

SCHEMA_INSTANCES = [
    ({"type": "object"}, {}),
    ({"type": "string", "minLength": 3}, "aaa"),
    ({"type": "integer", "minimum": 4, "multipleOf": 3}, 6),
    ({"type": "integer", "exclusiveMinimum": 4}, 5),
    ({"type": "number", "maximum": -1}, -1),
    ({"type": "boolean"}, False),
    ({"type": ["null", "string"]}, ""),
    ({"enum": ["b", "a"]}, "b"),
    ({"const": {"x": 1}}, {"x": 1}),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [0, 0]),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 0}, []),
    ({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}]}, ["", None]),
    (
        {
            "allOf": [
                {"properties": {"a": {"type": "integer"}}},
                {"properties": {"b": {"type": "string"}}, "required": ["b"]},
            ]
        },
        {"a": 0, "b": ""},
    ),
    (
        {
            "$defs": {"city": {"type": "string", "enum": ["Paris"]}},
            "type": "object",
            "properties": {"where": {"$ref": "#/$defs/city"}},
        },
        {"where": "Paris"},
    ),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 0),
]


@pytest.mark.parametrize(("schema", "expected"), SCHEMA_INSTANCES)
def test_schema_instances(schema: object, expected: object) -> None:
    assert instance_for(schema) == expected
    assert conforms(expected, schema)


CALLS = {
    "type": "array",
    "minItems": 1,
    "maxItems": 1,
    "items": {
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"enum": ["a"]}, "parameters": {"$ref": "#/$defs/P"}},
                "required": ["name", "parameters"],
            }
        ]
    },
    "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}}}},
}


@pytest.mark.parametrize(
    ("value", "schema"),
    [
        ({"x": 1}, {"type": "object", "required": ["x"]}),
        ({}, {"type": "object", "required": ["x"]}),
        (True, {"type": "integer"}),
        (1.0, {"type": "integer"}),
        ("a", {"type": ["integer", "null"]}),
        ({"x": "s"}, {"properties": {"x": {"type": "string"}}, "additionalProperties": False}),
        ({"y": 1}, {"properties": {"x": {"type": "string"}}, "additionalProperties": False}),
        ([{"name": "a", "parameters": {"x": 2}}], CALLS),
        ([{"name": "a", "parameters": {"x": "2"}}], CALLS),
        ([{"name": "b", "parameters": {}}], CALLS),
        ([], CALLS),
        (2, {"oneOf": [{"type": "integer"}, {"type": "number"}]}),
        ("z", {"allOf": [{"type": "string"}, {"enum": ["z"]}]}),
    ],
)
def test_conforms_agrees_with_jsonschema(value: object, schema: dict[str, object]) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    assert conforms(value, schema) == jsonschema.Draft202012Validator(schema).is_valid(value)


@pytest.mark.parametrize(
    "schema",
    [
        [],
        {"$ref": "http://elsewhere/x"},
        {"$ref": "#/nope"},
        {"type": "color"},
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
    ],
)
def test_unusable_schemas(schema: object) -> None:
    with pytest.raises(SchemaError):
        instance_for(schema)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ("just text", "mapping"),
        ({"rules": [{"match": "x"}]}, "'match' and 'reply'"),
        ({"rules": [{"match": "(", "reply": "x"}]}, "bad regex"),
        ({"rules": [{"match": "x", "reply": []}]}, "empty list"),
        ({"rules": [{"match": "x", "reply": "y", "when": 1}]}, "unknown keys"),
        ({"rules": [{"match": "x", "reply": "y", "match_on": "all"}]}, "match_on"),
        ({"rulez": []}, "unknown keys"),
    ],
)
def test_bad_scripts_are_named(data: object, words: str) -> None:
    with pytest.raises(ScriptError, match=words):
        Script.from_data(data, where="s.yaml")


def test_script_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="cannot read"):
        Script.load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [unclosed")
    with pytest.raises(ScriptError, match=r"bad\.yaml"):
        Script.load(bad)
    listed = tmp_path / "list.json"
    listed.write_text('[{"match": "hi", "reply": "hello"}]')
    assert Script.load(listed).replies_for("", "hi there") == ("hello",)


@pytest.fixture(scope="module")
def model() -> SimModel:
    return SimModel(ModelFiles.load(demo_model.path()))


def test_plan_rejects_prompts_beyond_the_context(model: SimModel) -> None:
    req = request("hi")
    req.tokenized.input_ids.extend([5] * 9000)
    with pytest.raises(InvalidRequest, match="context length"):
        model.plan(req)


def test_plan_clips_max_new_tokens_to_the_context(model: SimModel) -> None:
    req = request("hi", ignore_eos=True, max_new_tokens=100_000)
    (plan,) = model.plan(req)
    assert len(plan.token_ids) == 8192 - len(req.tokenized.input_ids)
    assert plan.finish_reason == "length"


def test_eos_inside_min_new_tokens_is_not_a_stop(model: SimModel) -> None:
    im_end = token_id("<|im_end|>")
    (plan,) = model.plan(request("a", min_new_tokens=1, stop_token_ids=[im_end]))
    assert plan.token_ids[-1] == im_end
    assert plan.matched_token_id == im_end


def test_missing_model_dir(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        ModelFiles.load(tmp_path)


def test_knob_updates_are_checked() -> None:
    knobs = SimKnobs()
    knobs.update({"delay_ms": 2, "fail_status": "UNAVAILABLE"})
    assert knobs.as_dict()["delay_ms"] == 2
    with pytest.raises(ValueError, match="unknown knobs"):
        knobs.update({"speed": 1})
    with pytest.raises(ValueError, match="gRPC status"):
        knobs.update({"fail_status": "BROKEN"})


def test_records_stay_bounded_and_keep_the_newest() -> None:
    records = SimRecords(keep=3)
    for i in range(20):
        rid = f"r{i}"
        records.note_request(pb.GenerateRequest(request_id=rid))
        records.outcomes[rid] = "stop"
        records.generated[rid] = i
    assert len(records.requests) <= 6
    assert len(records.outcomes) <= 6
    assert records.requests[-1].request_id == "r19"
    assert list(records.outcomes)[-1] == "r19"
    records.trim()
    assert [r.request_id for r in records.requests] == ["r17", "r18", "r19"]
    assert list(records.generated.items()) == [("r17", 17), ("r18", 18), ("r19", 19)]


async def test_a_paced_call_sleeps_its_time_unless_aborted() -> None:
    loop = asyncio.get_running_loop()
    state = Running("r1", 0, Rank(0, lambda: 0))
    started = loop.time()
    await state.sleep(0.05)
    assert loop.time() - started >= 0.04
    nap = asyncio.ensure_future(state.sleep(30))
    await asyncio.sleep(0.01)
    state.abort()
    await asyncio.wait_for(nap, 1)  # woken at once, not after 30 s
    assert state.aborted.is_set()
    started = loop.time()
    await state.sleep(30)  # aborted: no more naps
    assert loop.time() - started < 1


CALL_TAG = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<c>"],
        "tags": [
            {
                "type": "tag",
                "begin": '<c>{"name": "f", "arguments": ',
                "content": {"type": "json_schema", "json_schema": {"type": "object",
                            "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
                "end": "}</c>",
            }
        ],
        "at_least_one": False,
        "stop_after_first": True,
    },
}  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "fits"),
    [
        ("plain text", True),
        ('say <c>{"name": "f", "arguments": {"x": 1}}</c> then more', True),
        ('<c>{"name": "f", "arguments": {"x": "1"}}</c>', False),
        ('<c>{"name": "g", "arguments": {"x": 1}}</c>', False),
        ('<c>{"name": "f", "arguments": {"x": 1}}</c>' * 2, False),
    ],
)
def test_a_scripted_reply_answers_when_it_fits_the_structural_tag(reply: str, fits: bool) -> None:
    answer = structural_answer(json.dumps(CALL_TAG), (reply,))
    assert (answer == reply) is fits


def test_an_or_of_calls_and_a_format_builds_a_call_when_nothing_fits() -> None:
    calls = {**CALL_TAG["format"], "at_least_one": True}  # type: ignore[dict-item]
    answer_format = {"type": "json_schema", "json_schema": {"type": "object"}}
    tag = {"type": "structural_tag", "format": {"type": "or", "elements": [calls, answer_format]}}
    assert structural_answer(json.dumps(tag), ('{"free": "json"}',)) == '{"free": "json"}'
    assert (
        structural_answer(json.dumps(tag), ("prose",))
        == '<c>{"name": "f", "arguments": {"x": 0}}</c>'
    )
    legacy = {"structures": [{"begin": "<c>", "schema": {"type": "object"}, "end": "</c>"}],
              "triggers": ["<c>"]}  # fmt: skip
    assert structural_answer(json.dumps(legacy), ("a <c>{}</c>",)) == "a <c>{}</c>"
    assert structural_answer(json.dumps(legacy), ("a <c>[]</c>",)) == ""
