"""``turnout.tool_calls.names``: which names a request offers."""

from __future__ import annotations

from types import SimpleNamespace

from turnout.tool_calls.names import is_allowed, tool_names

from .harness import split, tools_for


def test_no_tools_means_no_filter() -> None:
    assert tool_names(None) is None
    assert tool_names([]) is None
    assert is_allowed("anything", None)


def test_openai_shape_and_flat_shape() -> None:
    names = tool_names([*tools_for(["a", "b"]), {"name": "c"}])
    assert names == frozenset({"a", "b", "c"})
    assert is_allowed("a", names)
    assert not is_allowed("d", names)


def test_object_shape_and_unusable_entries() -> None:
    obj = SimpleNamespace(type="function", function=SimpleNamespace(name="x"))
    assert tool_names([obj]) == frozenset({"x"})
    assert tool_names([{"type": "function", "function": {}}]) is None


def test_empty_name_never_allowed() -> None:
    assert not is_allowed("", None)


def test_split_cycles_sizes() -> None:
    assert split("abcdefg", (1, 2)) == ["a", "bc", "d", "ef", "g"]
    assert split("", (1,)) == []
