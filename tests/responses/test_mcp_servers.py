"""The ``mcp`` tools of a request, checked: filters, approval policies, headers kept out of
sight."""

from __future__ import annotations

from typing import Any

import pytest

from turnout.errors import ApiError
from turnout.responses.mcp.servers import check_mcp_tool, echoed_mcp_tool

URL = "https://mcp.example.com/mcp"


def server(**fields: Any) -> Any:
    return check_mcp_tool({"type": "mcp", "server_label": "s", "server_url": URL, **fields}, "t")


def test_approval_is_openais_always_unless_said_otherwise() -> None:
    assert server().needs_approval("add", None)
    assert not server(require_approval="never").needs_approval("add", None)
    mixed = server(require_approval={"never": {"tool_names": ["add"]}})
    assert not mixed.needs_approval("add", None)
    assert mixed.needs_approval("delete_all", None)
    by_hint = server(require_approval={"never": {"read_only": True}})
    assert not by_hint.needs_approval("look", {"readOnlyHint": True})
    assert by_hint.needs_approval("write", {"readOnlyHint": False})
    assert server(require_approval={"always": {"tool_names": ["x"]}}).needs_approval("x", None)


def test_allowed_tools_by_name_or_filter() -> None:
    assert server().allows("anything", None)
    named = server(allowed_tools=["add"])
    assert named.allows("add", None)
    assert not named.allows("sub", None)
    read_only = server(allowed_tools={"read_only": True})
    assert read_only.allows("look", {"readOnlyHint": True})
    assert not read_only.allows("write", None)


def test_headers_and_the_token_are_sent_never_shown() -> None:
    tool = {"type": "mcp", "server_label": "s", "server_url": URL,
            "headers": {"X-Key": "k1"}, "authorization": "t0k"}  # fmt: skip
    checked = check_mcp_tool(tool, "t")
    assert checked.headers == {"X-Key": "k1", "Authorization": "Bearer t0k"}
    assert "k1" not in repr(checked)
    assert "t0k" not in repr(checked)
    echoed = echoed_mcp_tool(tool)
    assert echoed["headers"] is None
    assert "authorization" not in echoed
    assert "t0k" not in repr(echoed)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"server_label": ""}, "t.server_label"),
        ({"server_url": "file:///etc/passwd"}, "t.server_url"),
        ({"allowed_tools": "add"}, "t.allowed_tools"),
        ({"allowed_tools": {"names": ["add"]}}, "t.allowed_tools"),
        ({"authorization": 5}, "t.authorization"),
        ({"tunnel_id": "tunnel_x"}, "t.tunnel_id"),
        ({"surprise": 1}, "t.surprise"),
    ],
)
def test_bad_fields_are_400s_naming_them(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(ApiError) as info:
        server(**fields)
    assert info.value.status == 400
    assert info.value.param == param
