"""MCP servers the operator configures (``mcp.servers``): requests name them by label, the
router reaches them wherever they are (a stdio command, a loopback URL) and never shows their
URL, command or headers."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.server.harness import MODEL, Router, run_router
from turnout.config import build_config
from turnout.errors import ConfigError

from .mcp_server import caller_digest, mcp_server
from .test_mcp_e2e import RULES


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fixtures")
    (folder / "note.txt").write_text("XYZZY-FIXTURE is written here.")
    return folder


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory, fixtures: Path) -> Iterator[Router]:
    script = tmp_path_factory.mktemp("sim") / "script.yaml"
    script.write_text(yaml.safe_dump({"rules": RULES}))
    stdio = [sys.executable, "-m", "tests.responses.mcp_server", "stdio", str(fixtures)]
    with mcp_server(fixtures) as url:
        servers = {
            "local": {"url": url, "headers": {"Authorization": "Bearer s3cret"}},
            "piped": {"command": stdio, "allowed_tools": ["add", "read_fixture"]},
            "elsewhere": {"url": url, "models": ["another-model"]},
        }
        with run_router(
            {"mcp": {"servers": servers, "call_timeout_s": 20}},  # no allowed_hosts at all
            sims=1,
            sim_kwargs={"script": script},
            model={"tool_parser": "qwen"},
        ) as running:
            yield running


def post(router: Router, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{router.base_url}/v1/responses", json={"model": MODEL, **body}, timeout=60)


def test_a_configured_url_server_is_reached_on_loopback(router: Router) -> None:
    tools = [{"type": "mcp", "server_label": "local"}]
    reply = post(router, {"input": "who am i", "tools": tools})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    call = body["output"][1]
    assert call["type"] == "mcp_call"  # the operator's servers need no approval by default
    assert call["output"] == caller_digest("Bearer s3cret")
    assert body["tools"] == [
        {"type": "mcp", "server_label": "local", "server_url": None, "allowed_tools": None,
         "require_approval": None, "headers": None}
    ]  # fmt: skip


def test_a_configured_stdio_server_is_started_and_called(router: Router) -> None:
    tools = [{"type": "mcp", "server_label": "piped"}]
    reply = post(router, {"input": "add two numbers", "tools": tools})
    assert reply.status_code == 200, reply.text
    listed, _said, call, _answer = reply.json()["output"]
    assert sorted(tool["name"] for tool in listed["tools"]) == ["add", "read_fixture"]
    assert json.loads(call["arguments"]) == {"a": 2, "b": 3}
    assert call["output"] == "5.0"
    assert "stdio" not in reply.text


def test_unknown_labels_and_other_models_servers_are_400s(router: Router) -> None:
    for label in ("nowhere", "elsewhere"):
        reply = post(router, {"input": "hi", "tools": [{"type": "mcp", "server_label": label}]})
        assert reply.status_code == 400
        error = reply.json()["error"]
        assert error["code"] == "mcp_server_not_found"
        assert error["param"] == "tools[0].server_label"


@pytest.mark.parametrize(
    "server",
    [{}, {"url": "http://mcp.internal/mcp", "command": ["mcp-server"]}, {"url": "ftp://x/"}],
)
def test_a_configured_server_is_a_url_or_a_command(server: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"mcp\.servers"):
        build_config({"mcp": {"servers": {"broken": server}}})


def test_a_configured_server_may_be_for_some_tenants_only(fixtures: Path) -> None:
    keys = {"a": "key-of-a", "b": "key-of-b"}
    with mcp_server(fixtures) as url:
        config = {
            "server": {"api_keys": ["plain-key"]},
            "tenants": {name: {"keys": [key]} for name, key in keys.items()},
            "mcp": {"servers": {"team-a": {"url": url, "tenants": ["a"]}}},
        }
        with run_router(config, sims=1) as router:

            def ask(key: str) -> httpx.Response:
                return httpx.post(
                    f"{router.base_url}/v1/responses",
                    json={"model": MODEL, "input": "hi",
                          "tools": [{"type": "mcp", "server_label": "team-a"}]},
                    headers={"authorization": f"Bearer {key}"},
                    timeout=60,
                )  # fmt: skip

            assert ask(keys["a"]).status_code == 200
            for stranger in (keys["b"], "plain-key"):
                refused = ask(stranger)
                assert refused.status_code == 400
                assert refused.json()["error"]["code"] == "mcp_server_not_found"
