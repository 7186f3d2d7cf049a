"""Pythonic call lists."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from .harness import (
    PROPERTY_SETTINGS,
    Call,
    assert_no_text_lost,
    assert_stream_matches_complete,
    check_rendered,
    chunk_sizes,
    json_values,
    names,
    noisy_text,
    plain_text,
    tools_for,
)

P = "pythonic"
TOOLS = tools_for(["get_weather", "search"])


def _py(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    return repr(value)


def render(calls: list[Call]) -> str:
    """``[name(key=value, ...), ...]`` (keys must be identifiers)."""
    parts = [f"{n}(" + ", ".join(f"{k}={_py(v)}" for k, v in a.items()) + ")" for n, a in calls]
    return "[" + ", ".join(parts) + "]"


def test_calls_literals_and_text() -> None:
    calls: list[Call] = [
        ("get_weather", {"city": "Paris ]", "days": 3, "flag": True, "x": None}),
        ("search", {}),
    ]
    check_rendered(P, render, calls, before="Sure ", after=" ok", tools=TOOLS)


def test_wrapper_and_prose_brackets() -> None:
    text = "<|python_start|>[search(q='a')]<|python_end|> see [1] and [x]"
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.normal_text, [c.arguments for c in result.calls]) == (
        " see [1] and [x]",
        ['{"q": "a"}'],
    )


def test_unconvertible_or_unknown_list_stays_text() -> None:
    for text in ["[search(q=b'x')]", "[search(q=1e999)]", "[nope(a=1)]", "[search(q=1)", "[f(x)]"]:
        result = assert_stream_matches_complete(P, text, TOOLS)
        assert (result.calls, result.normal_text) == ([], text)


_IDENT = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
_CALLS = st.lists(
    st.tuples(
        names().filter(lambda n: "-" not in n and n.isascii()),
        st.dictionaries(_IDENT, json_values(6), max_size=3),
    ),
    min_size=1,
    max_size=3,
)


@settings(PROPERTY_SETTINGS, max_examples=25)
@given(calls=_CALLS, before=plain_text(avoid=("[", "<")), sizes=chunk_sizes())
def test_property_round_trip(calls: list[Call], before: str, sizes: list[int]) -> None:
    import keyword

    if any(keyword.iskeyword(k) for _, a in calls for k in a) or any(
        keyword.iskeyword(p) for n, _ in calls for p in n.split(".")
    ):
        return
    text = before + render(calls)
    result = assert_stream_matches_complete(P, text, None, [sizes, (1,)])
    assert result.normal_text == before
    assert [c.name for c in result.calls] == [n for n, _ in calls]


@settings(PROPERTY_SETTINGS, max_examples=25)
@given(text=noisy_text(("[f(", "a=1", ")]", "<|python_start|>", "'", "(")))
def test_property_arbitrary_input(text: str) -> None:
    assert_no_text_lost(P, text, None)
