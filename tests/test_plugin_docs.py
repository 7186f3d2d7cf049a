"""docs/plugins.md documents what a plugin author works with, taken from the code: a field added
to the policy API or the parse endpoint without docs fails here."""

from __future__ import annotations

import dataclasses
import inspect
import re

import msgspec
import pytest

import turnout.hookspecs
import turnout.tool_calls
from turnout.routing.types import Candidate, RoutingRequest
from turnout.server.protocol import ParseFunctionCallRequest

from .conftest import REPO_ROOT

DOC = (REPO_ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DOC.index(f"\n## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end > 0 else None]


def _table_rows(text: str) -> set[str]:
    return set(re.findall(r"^\| `([a-z_]+)`", text, re.MULTILINE))


def test_every_routing_request_field_and_candidate_attribute_is_described() -> None:
    policies = _section("Policies")
    fields = {field.name for field in dataclasses.fields(RoutingRequest)}
    attributes = {name for name, _ in inspect.getmembers(Candidate, inspect.isdatadescriptor)}
    attributes -= {"__weakref__", "__dict__"}
    assert fields | attributes <= _table_rows(policies), policies
    assert "{name, params}" in policies


def test_the_parse_function_call_body_is_described() -> None:
    endpoint = _section("Trying a parser over HTTP")
    rows = " ".join(re.findall(r"^\| (.+?) \|", endpoint, re.MULTILINE))
    for field in msgspec.structs.fields(ParseFunctionCallRequest):
        assert f"`{field.name}`" in rows, field.name


def test_turnout_plugins_warns_that_it_drops_the_built_ins() -> None:
    testing = _section("Testing a plugin")
    assert "built-ins included" in testing


def test_no_stale_line_about_prefill_decode_workers() -> None:
    assert "such workers are logged and not used" not in DOC


def test_the_tutorial_and_the_public_bases_are_there() -> None:
    assert "## Tutorial: from an empty directory to a published plugin" in DOC
    for name in ("BlockCallsParser", "BareJsonParser", "TaggedCallsParser", "XmlToolParser"):
        assert name in turnout.tool_calls.__all__
        assert f"`{name}`" in _section("Tool parsers")


@pytest.mark.parametrize(
    "alias",
    [
        "ToolParserRegister",
        "ReasoningParserRegister",
        "PolicyRegister",
        "DiscoveryRegister",
        "ChatFormatRegister",
    ],
)
def test_each_typed_register_is_named_in_its_hook_section(alias: str) -> None:
    assert hasattr(turnout.hookspecs, alias)
    assert f"(`{alias}`)" in _section("Hooks")
