"""The simulator's unary RPCs, loads, constraints and scripted answers, over a real socket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
import yaml

from turnout import demo_model
from turnout.sim import SimWorker
from turnout.wire import Constraint, WorkerCallError, WorkerClient

from ..wire._helpers import decode, fold, request, token_id


async def test_model_info_describes_the_demo_model(client: WorkerClient) -> None:
    info = await client.get_model_info()
    assert info.served_model_name == demo_model.MODEL_ID
    assert Path(info.model_path) == demo_model.path()
    assert info.is_generation
    assert list(info.eos_token_ids) == [token_id("<|im_end|>"), token_id("<|endoftext|>")]
    assert info.vocab_size == 3000
    assert info.max_context_length == 8192
    assert info.weight_version.startswith("turnout-sim")  # honest about being a simulator
    assert json.loads(info.default_sampling_params_json)["top_p"] == 0.8


async def test_server_info_says_simulated(sim: SimWorker, client: WorkerClient) -> None:
    sim.knobs.delay_ms = 3
    info = await client.get_server_info()
    assert info.server_type == "turnout-sim"
    assert info.sglang_version.startswith("turnout-sim/")
    assert info.server_args["simulated"] is True
    assert info.server_args["knobs"]["delay_ms"] == 3
    assert info.uptime_seconds >= 0
    assert info.start_time.seconds > 0


async def test_loads_report_running_and_waiting(sim: SimWorker, client: WorkerClient) -> None:
    idle = await client.get_loads()
    assert idle.dp_rank_count == 1
    assert idle.loads[0].num_running_reqs == 0
    sim.knobs.update({"delay_ms": 20, "max_running": 1})
    streams = [client.generate(request(" ".join(["w"] * 50), request_id=f"r{i}")) for i in range(3)]
    await anext(streams[0])
    await asyncio.sleep(0.05)
    busy = await client.get_loads(["all"])
    load = busy.loads[0]
    assert load.num_running_reqs == 1
    assert load.num_waiting_reqs == 2
    assert load.num_total_reqs == 3
    assert load.max_running_requests == 1
    assert load.utilization == 1.0
    assert load.num_used_tokens > 0
    assert load.HasField("memory")
    assert load.HasField("queues")
    assert load.queues.waiting == 2
    assert busy.aggregate.total_waiting_reqs == 2
    for stream in streams:
        await stream.aclose()


async def test_loads_rejects_bad_include(client: WorkerClient) -> None:
    with pytest.raises(WorkerCallError) as info:
        await client.get_loads(["everything"])
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(WorkerCallError):
        await client.get_loads(dp_rank=3)
    assert len((await client.get_loads(dp_rank=0)).loads) == 1


TOOL_SCHEMA = {
    "type": "array",
    "minItems": 1,
    "items": {
        "type": "object",
        "anyOf": [
            {
                "properties": {
                    "name": {"type": "string", "enum": ["get_weather"]},
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string"},
                            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                            "days": {"type": "integer", "minimum": 1},
                        },
                        "required": ["city"],
                    },
                },
                "required": ["name", "parameters"],
            },
            {
                "properties": {
                    "name": {"type": "string", "enum": ["search"]},
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
                "required": ["name", "parameters"],
            },
        ],
    },
}


async def test_json_schema_is_recorded_and_honoured(sim: SimWorker, client: WorkerClient) -> None:
    schema = json.dumps(TOOL_SCHEMA)
    req = request("weather?", constraint=Constraint("json_schema", schema), n=2)
    out = await fold(client.generate(req))
    assert sim.constraints == [("json_schema", schema)]
    for i in (0, 1):
        calls = json.loads(out.text(i, skip_special=True))
        assert calls == [
            {"name": "get_weather", "parameters": {"city": "", "unit": "celsius", "days": 1}}
        ]
        assert out.completes[i].finish_reason == "stop"


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("regex", "[0-9]+"),
        ("ebnf", 'root ::= "a"'),
        ("structural_tag", '{"type": "structural_tag", "format": {"type": "const_string"}}'),
    ],
)
async def test_other_constraints_are_recorded(
    sim: SimWorker, client: WorkerClient, kind: str, value: str
) -> None:
    await fold(client.generate(request("hi", constraint=Constraint(kind, value))))  # type: ignore[arg-type]
    assert sim.constraints == [(kind, value)]
    assert sim.requests[-1].sampling_params.WhichOneof("constraint") is not None


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("json_schema", "{not json"),
        ("structural_tag", "{not json"),
        ("structural_tag", '{"type": "x"}'),
        ("structural_tag", '{"format": {"type": "no_such_format"}}'),
    ],
)
async def test_unusable_constraints_are_invalid_argument(
    client: WorkerClient, kind: str, value: str
) -> None:
    req = request("hi", constraint=Constraint(kind, value))  # type: ignore[arg-type]
    with pytest.raises(WorkerCallError) as info:
        await fold(client.generate(req))
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT


TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
SCRIPT = {
    "rules": [
        {"match": r"weather in (\w+)", "reply": TOOL_CALL},
        {
            "match": "think",
            "reply": ["<think>\nhmm\n</think>\n\nA", "<think>\nwell\n</think>\n\nB"],
        },
        {
            "match": "SYSTEM-MARK",
            "match_on": "prompt",
            "reply": "saw the system prompt; you said {user}",
        },
    ],
    "default": "no rule matched",
}


async def test_scripted_replies(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(SCRIPT))
    async with SimWorker(port=0, script=script) as sim, WorkerClient(sim.url) as client:
        out = await fold(client.generate(request("what is the weather in Paris")))
        text = out.text(skip_special=True)
        assert text.startswith("<tool_call>\n{")
        assert text.endswith("</tool_call>")
        assert token_id("<tool_call>") in out.tokens[0]
        out = await fold(client.generate(request("please think", n=2)))
        assert out.text(0, skip_special=True) == "<think>\nhmm\n</think>\n\nA"
        assert out.text(1, skip_special=True) == "<think>\nwell\n</think>\n\nB"
        ids = list(
            decode_ids(
                "<|im_start|>system\nSYSTEM-MARK<|im_end|>\n<|im_start|>user\nhey<|im_end|>\n"
                "<|im_start|>assistant\n"
            )
        )
        gen = request("ignored")
        del gen.tokenized.input_ids[:]
        gen.tokenized.input_ids.extend(ids)
        out = await fold(client.generate(gen))
        assert out.text(skip_special=True) == "saw the system prompt; you said hey"
        out = await fold(client.generate(request("something else")))
        assert out.text(skip_special=True) == "no rule matched"


def decode_ids(text: str) -> list[int]:
    from ..wire._helpers import tokenizer

    return list(tokenizer().encode(text, add_special_tokens=False).ids)


async def test_echo_of_a_raw_prompt(client: WorkerClient) -> None:
    gen = request("x")
    del gen.tokenized.input_ids[:]
    gen.tokenized.input_ids.extend(decode_ids("Plain completion prompt"))
    out = await fold(client.generate(gen))
    assert out.text(skip_special=True) == "Plain completion prompt"
    assert decode(out.tokens[0][-1:]) == "<|im_end|>"


async def test_a_stream_its_caller_closes_at_a_yield_is_recorded_as_cancelled(
    sim: SimWorker,
) -> None:
    # gRPC closes a handler's generator at its yield when the caller is gone by the time the
    # next message is sent (a router that aborts a request and then exits at once).
    context = cast("grpc.aio.ServicerContext[Any, Any]", _CallWithoutMetadata())
    stream = sim.servicer.Generate(request("Hi", request_id="gone", max_new_tokens=500), context)
    await anext(stream)
    await stream.aclose()
    assert sim.records.outcomes["gone"] == "cancelled"
    assert sim.running == 0


class _CallWithoutMetadata:
    """What the servicer reads of a call's context on the happy path."""

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()
