"""MCP tools in /v1/responses end to end: the official openai client over HTTP, the router,
a simulated worker scripted to call the tools, and a real MCP server built with the ``mcp``
SDK (tests/responses/mcp_server.py) that the router calls through the SDK's client."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.server.harness import MODEL, Router, run_router

from .events import check_response, fold_events
from .mcp_server import caller_digest, garbage_server, mcp_server
from .test_responses_e2e import last_prompt, raw_stream


def _call(name: str, arguments: dict[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


#: Rules on the whole prompt first (a tool's result, once it is there), then the questions.
RULES = [
    {"match": "Error: ", "match_on": "prompt", "reply": "The tool failed."},
    {"match": "XYZZY-FIXTURE", "match_on": "prompt", "reply": "The fixture says XYZZY-FIXTURE."},
    {"match": "5\\.0", "match_on": "prompt", "reply": "The sum is 5."},
    {"match": "caller-", "match_on": "prompt", "reply": "I am known."},
    {"match": "add two numbers", "reply": "Let me add.\n" + _call("add", {"a": 2, "b": 3})},
    {"match": "add twice", "reply": f"{_call('add', {'a': 1, 'b': 2})}\n{_call('add', {'a': 3})}"},
    {"match": "read the fixture", "reply": _call("read_fixture", {"name": "note.txt"})},
    {"match": "please hang", "reply": _call("hang", {})},
    {"match": "something huge", "reply": _call("huge", {"size": 200_000})},
    {"match": "who am i", "reply": _call("whoami", {})},
    # Tool results are user turns to the demo model's template: this one calls on and on.
    {"match": "add forever", "match_on": "prompt", "reply": _call("add", {"a": 1, "b": 1})},
]
MCP_CONFIG = {
    "allowed_hosts": ["127.0.0.1"],
    "allow_private_addresses": True,
    "call_timeout_s": 3,
    "max_result_bytes": 65536,
    "max_tool_rounds": 2,
}


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    fixtures = tmp_path_factory.mktemp("fixtures")
    (fixtures / "note.txt").write_text("XYZZY-FIXTURE is written here.")
    with mcp_server(fixtures) as url:
        yield url


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    script = tmp_path_factory.mktemp("sim") / "script.yaml"
    script.write_text(yaml.safe_dump({"rules": RULES}))
    with run_router(
        {"mcp": MCP_CONFIG},
        sims=1,
        sim_kwargs={"script": script},
        model={"tool_parser": "qwen"},
    ) as running:
        yield running


@pytest.fixture
def client(router: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0)


def mcp_tool(url: str, **fields: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "tests", "server_url": url,
            "require_approval": "never", **fields}  # fmt: skip


def post(router: Router, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{router.base_url}/v1/responses", json={"model": MODEL, **body}, timeout=60)


@pytest.mark.parametrize("stream", [False, True])
def test_the_model_calls_a_tool_and_answers_with_its_result(
    client: openai.OpenAI, router: Router, server_url: str, stream: bool
) -> None:
    fields: dict[str, Any] = {"model": MODEL, "tools": [mcp_tool(server_url)]}
    if stream:
        with client.responses.stream(input="add two numbers", **fields) as events:
            response = events.get_final_response()
    else:
        response = client.responses.create(input="add two numbers", **fields)
    listed, said, call, answer = response.output
    assert listed.type == "mcp_list_tools"
    assert {tool.name for tool in listed.tools} >= {"add", "read_fixture"}
    assert said.type == "message"
    assert call.type == "mcp_call"
    assert (call.name, call.server_label, call.error) == ("add", "tests", None)
    assert json.loads(call.arguments) == {"a": 2, "b": 3}
    assert call.output == "5.0"
    assert answer.type == "message"
    assert response.output_text == "Let me add.The sum is 5."
    assert response.status == "completed"
    assert response.usage is not None
    assert response.usage.output_tokens > 0
    tool = response.tools[0]
    assert tool.type == "mcp"
    assert tool.headers is None
    # The second generation read the call and its output.
    prompt = last_prompt(router)
    assert prompt.index('"a": 2') < prompt.index("5.0")
    kept = client.responses.retrieve(response.id)
    assert [item.type for item in kept.output] == [item.type for item in response.output]


def test_an_sse_server_is_called_too(
    client: openai.OpenAI, tmp_path: Path, server_url: str
) -> None:
    (tmp_path / "note.txt").write_text("XYZZY-FIXTURE over SSE.")
    with mcp_server(tmp_path, sse=True) as url:
        assert url.endswith("/sse")
        tools: Any = [mcp_tool(url)]
        response = client.responses.create(model=MODEL, input="read the fixture", tools=tools)
    call = response.output[1]
    assert call.type == "mcp_call"
    assert call.output == "XYZZY-FIXTURE over SSE."
    assert response.output_text == "The fixture says XYZZY-FIXTURE."


def test_the_stream_has_openais_mcp_events(router: Router, server_url: str) -> None:
    events = raw_stream(router, {"input": "read the fixture", "tools": [mcp_tool(server_url)]})
    final = fold_events(events)
    check_response(final)
    kinds = [event["type"] for event in events]
    assert kinds.index("response.mcp_list_tools.in_progress") < kinds.index(
        "response.mcp_list_tools.completed"
    )
    order = [
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ]
    assert [kinds.index(kind) for kind in order] == sorted(kinds.index(kind) for kind in order)
    assert final["output"][1]["output"] == "XYZZY-FIXTURE is written here."
    assert final["output"][-1]["content"][0]["text"] == "The fixture says XYZZY-FIXTURE."


def test_an_approval_round_trip(client: openai.OpenAI, server_url: str) -> None:
    tools: Any = [mcp_tool(server_url, require_approval="always", allowed_tools=["add"])]
    first = client.responses.create(model=MODEL, input="add two numbers", tools=tools)
    listed, _said, asked = first.output
    assert [tool.name for tool in listed.tools] == ["add"]
    assert asked.type == "mcp_approval_request"
    assert asked.name == "add"
    assert json.loads(asked.arguments) == {"a": 2, "b": 3}
    assert first.status == "completed"
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id,
                "approve": True}],
    )  # fmt: skip
    call, _answer = second.output  # the tools were listed by the first response
    assert call.type == "mcp_call"
    assert call.approval_request_id == asked.id
    assert call.output == "5.0"
    assert second.output_text == "The sum is 5."
    refused = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=tools,
        input=[{"type": "mcp_approval_response", "approval_request_id": asked.id,
                "approve": False, "reason": "not today"}],
    )  # fmt: skip
    assert [item.type for item in refused.output] == ["message"]
    # The model read the refusal (the simulated one echoes the last turn it was given).
    assert "did not approve this call: not today" in refused.output_text


def test_headers_reach_the_server_and_are_never_echoed_nor_logged(
    client: openai.OpenAI, router: Router, server_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tools: Any = [mcp_tool(server_url, headers={"Authorization": "Bearer s3cret"})]
    with caplog.at_level(logging.DEBUG):
        response = client.responses.create(model=MODEL, input="who am i", tools=tools)
    assert caplog.records  # the router's own loggers and the SDK's were heard
    assert "s3cret" not in caplog.text
    assert response.output[1].output == caller_digest("Bearer s3cret")  # type: ignore[union-attr]
    assert response.tools[0].headers is None  # type: ignore[union-attr]
    kept = httpx.get(f"{router.base_url}/v1/responses/{response.id}", timeout=10)
    assert '"headers":null' in kept.text.replace(" ", "")
    assert "Bearer s3cret" not in json.dumps(kept.json()["tools"])


@pytest.mark.parametrize("stream", [False, True])
def test_a_hanging_tool_is_an_mcp_call_error(router: Router, server_url: str, stream: bool) -> None:
    body = {"input": "please hang", "tools": [mcp_tool(server_url)]}
    if stream:
        events = raw_stream(router, body)
        assert "response.mcp_call.failed" in [event["type"] for event in events]
        response = fold_events(events)
    else:
        reply = post(router, body)
        assert reply.status_code == 200, reply.text
        response = reply.json()
    check_response(response)
    call = response["output"][1]
    assert call["type"] == "mcp_call"
    assert call["status"] == "failed"
    assert call["output"] is None
    assert call["error"]["type"] == "http_error"
    assert call["error"]["code"] == 504
    assert response["output"][-1]["content"][0]["text"] == "The tool failed."


def test_a_huge_result_is_an_mcp_call_error(router: Router, server_url: str) -> None:
    reply = post(router, {"input": "something huge", "tools": [mcp_tool(server_url)]})
    assert reply.status_code == 200, reply.text
    call = reply.json()["output"][1]
    assert call["error"]["code"] == 413
    assert "65536 bytes" in call["error"]["message"]


def test_malformed_json_rpc_fails_the_listing_not_the_response(router: Router) -> None:
    with garbage_server() as url:
        reply = post(router, {"input": "add two numbers", "tools": [mcp_tool(url)]})
    assert reply.status_code == 200, reply.text
    response = reply.json()
    check_response(response)
    listed = response["output"][0]
    assert listed["type"] == "mcp_list_tools"
    assert listed["error"]
    assert listed["tools"] == []
    # The model saw no MCP tool: nothing was called.
    assert [item["type"] for item in response["output"]] == ["mcp_list_tools", "message"]


@pytest.mark.parametrize("listening", [True, False])
def test_a_server_that_never_answers_or_is_not_there_fails_the_listing(
    router: Router, listening: bool
) -> None:
    """A port that accepts connections and never answers (the listing's deadline), or no
    server at all: an ``mcp_list_tools`` item with an error, the response answered."""
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    accepted: list[socket.socket] = []
    if listening:
        thread = threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True)
        thread.start()
    else:
        silent.close()
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        reply = post(router, {"input": "add two numbers", "tools": [mcp_tool(url)]})
    finally:
        for connection in accepted:
            connection.close()
        silent.close()
    assert reply.status_code == 200, reply.text
    listed = reply.json()["output"][0]
    assert listed["type"] == "mcp_list_tools"
    assert ("did not answer within 3s" if listening else "cannot be reached") in listed["error"]


def test_tool_rounds_are_bounded(router: Router, server_url: str) -> None:
    reply = post(router, {"input": "add forever", "tools": [mcp_tool(server_url)]})
    assert reply.status_code == 200, reply.text
    output = reply.json()["output"]
    calls = [item for item in output if item["type"] == "mcp_call"]
    assert len(calls) == MCP_CONFIG["max_tool_rounds"]
    assert all(call["output"] == "2.0" for call in calls)
    body = {"input": "add forever", "tools": [mcp_tool(server_url)], "max_tool_calls": 1}
    reply = post(router, body)
    assert reply.status_code == 200, reply.text
    calls = [item for item in reply.json()["output"] if item["type"] == "mcp_call"]
    assert [call["output"] for call in calls] == ["2.0"]
    body = {"input": "add twice", "tools": [mcp_tool(server_url)], "max_tool_calls": 1}
    calls = [item for item in post(router, body).json()["output"] if item["type"] == "mcp_call"]
    assert calls[0]["output"] == "3.0"
    assert len(calls) == 2
    assert calls[1]["status"] == "failed"
    assert "max_tool_calls (1)" in calls[1]["error"]["message"]


def test_servers_the_operator_does_not_allow_are_400s(server_url: str, tmp_path: Path) -> None:
    with run_router(sims=1) as bare:
        reply = post(bare, {"input": "hi", "tools": [mcp_tool(server_url)]})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "mcp_server_not_allowed"
    assert error["param"] == "tools[0].server_url"
    with run_router({"mcp": {"allowed_hosts": ["127.0.0.1", "localhost"]}}, sims=1) as listed:
        for url in (server_url, server_url.replace("127.0.0.1", "localhost")):
            reply = post(listed, {"input": "hi", "tools": [mcp_tool(url)]})
            assert reply.status_code == 400, url
            assert reply.json()["error"]["code"] == "mcp_server_not_allowed"
            assert "private, loopback" in reply.json()["error"]["message"]


def test_bad_mcp_tools_are_400s(router: Router, server_url: str) -> None:
    cases = [
        ({"server_label": "1bad"}, "tools[0].server_label"),
        ({"server_url": "ftp://127.0.0.1/mcp"}, "tools[0].server_url"),
        ({"server_url": "http://user:pw@127.0.0.1/mcp"}, "tools[0].server_url"),
        ({"connector_id": "connector_gmail"}, "tools[0].connector_id"),
        ({"headers": {"x": 1}}, "tools[0].headers"),
        ({"require_approval": "sometimes"}, "tools[0].require_approval"),
    ]
    for fields, param in cases:
        reply = post(router, {"input": "hi", "tools": [mcp_tool(server_url, **fields)]})
        assert reply.status_code == 400, fields
        error = reply.json()["error"]
        assert error["param"] == param
        assert isinstance(error["code"], str)
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}
    reply = post(router, {"input": [answer], "tools": [mcp_tool(server_url)], "stream": True})
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "mcp_approval_request_not_found"
    choice = {"type": "mcp", "server_label": "elsewhere"}
    reply = post(router, {"input": "hi", "tools": [mcp_tool(server_url)], "tool_choice": choice})
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "tool_choice"
    reply = post(
        router,
        {"input": [{"type": "mcp_approval_response", "approval_request_id": "mcpr_x",
                    "approve": True}]},
    )  # fmt: skip
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "mcp_tools_missing"


def test_replayed_mcp_items_are_read_back(router: Router, server_url: str) -> None:
    """A stateless client (``store: false``) sends the output back as input: the listed
    tools are not listed again, the calls and their outputs reach the prompt."""
    tools = [mcp_tool(server_url)]
    first = post(router, {"input": "add two numbers", "tools": tools, "store": False}).json()
    assert [item["type"] for item in first["output"]] == [
        "mcp_list_tools", "message", "mcp_call", "message",
    ]  # fmt: skip
    replay = [{"role": "user", "content": "add two numbers"}, *first["output"]]
    replay.append({"role": "user", "content": "thanks, bye"})
    second = post(router, {"input": replay, "tools": tools, "store": False})
    assert second.status_code == 200, second.text
    body = second.json()
    assert [item["type"] for item in body["output"]] == ["message"]
    prompt = last_prompt(router)
    assert prompt.index('"a": 2') < prompt.index("5.0") < prompt.index("thanks, bye")
    bad = post(router, {"input": [{**first["output"][2], "arguments": 3}], "tools": tools})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "input[0].arguments"


def test_the_openai_agents_sdk_runs_a_hosted_mcp_tool_with_approval(
    router: Router, server_url: str
) -> None:
    """The openai-agents SDK's ``HostedMCPTool``: it answers the approval request itself
    (replaying the items, no ``previous_response_id``) and reads the call's result."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)
    approved: list[str] = []

    def approve(request: Any) -> Any:
        approved.append(request.data.name)
        return {"approve": True}

    async def run() -> Any:
        client = openai.AsyncOpenAI(
            base_url=f"{router.base_url}/v1", api_key="unused", max_retries=0
        )
        tool = agents.HostedMCPTool(
            tool_config={"type": "mcp", "server_label": "tests", "server_url": server_url,
                         "require_approval": "always"},
            on_approval_request=approve,
        )  # fmt: skip
        agent = agents.Agent(
            name="adder",
            instructions="Be brief.",
            model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
            tools=[tool],
        )
        try:
            return await agents.Runner.run(agent, "add two numbers")
        finally:
            await client.close()

    result = asyncio.run(run())
    assert result.final_output == "The sum is 5."
    assert approved == ["add"]
    kinds = [type(item).__name__ for item in result.new_items]
    assert kinds.index("MCPApprovalRequestItem") < kinds.index("ToolCallItem")
