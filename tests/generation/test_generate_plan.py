"""What ``/generate``'s prompt builder makes of a request's constraints."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from turnout.demo_model import path as demo_path
from turnout.errors import ApiError
from turnout.generation import generate
from turnout.generation.context import RequestContext
from turnout.generation.models import ModelRuntime
from turnout.generation.plan import Plan
from turnout.generation.requests import GenerateRequestBody
from turnout.tokenizer import ModelTokenizer

RUNTIME = ModelRuntime("m", ModelTokenizer.from_dir(demo_path()))


async def plan_of(sampling: dict[str, Any]) -> Plan:
    body = {"text": "hello", "sampling_params": sampling}
    request = msgspec.convert(body, GenerateRequestBody)
    ctx = RequestContext("gnt-1", {}, None, worker_request_id="gnt-1")
    generate.ENDPOINT.check(request)
    return await generate.ENDPOINT.prompts(request, RUNTIME, ctx)


async def test_no_constraint_is_none() -> None:
    assert (await plan_of({})).constraint is None
    # An empty one is none too, as in SGLang.
    assert (await plan_of({"regex": "", "ebnf": ""})).constraint is None


@pytest.mark.parametrize(
    ("sampling", "kind", "value"),
    [
        ({"regex": "[0-9]+"}, "regex", "[0-9]+"),
        ({"ebnf": 'root ::= "a"', "regex": ""}, "ebnf", 'root ::= "a"'),
        ({"json_schema": {"type": "object"}}, "json_schema", '{"type":"object"}'),
        ({"json_schema": '{"type": "object"}'}, "json_schema", '{"type": "object"}'),
        ({"structural_tag": {"type": "x"}}, "structural_tag", '{"type":"x"}'),
    ],
)
async def test_the_one_constraint_goes_to_the_worker_as_text(
    sampling: dict[str, Any], kind: str, value: str
) -> None:
    constraint = (await plan_of(sampling)).constraint
    assert constraint is not None
    assert (constraint.kind, constraint.value) == (kind, value)


async def test_two_constraints_are_a_400() -> None:
    with pytest.raises(ApiError) as caught:
        await plan_of({"regex": "a", "json_schema": {"type": "object"}})
    assert caught.value.status == 400
    assert caught.value.param == "sampling_params"
