"""Properties of the XML-family parsers (and gpt-oss): streaming == one-shot, calls found exactly.

Each parser's test module exports ``render(calls)``; these tests generate calls (string values
declared ``"type": "string"`` in the tools, other values left to inference, except where a format
does not infer them), surround them with prose, and check every parser with one-character and
random chunkings. A call is only ever returned once complete: an output that ends inside one
gives text, or (cut off by the token limit) the call as received.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from turnout.tool_calls.types import ToolParseResult
from turnout.tool_calls.xml_stream import XmlToolParser

from . import (
    test_deepseek_v4,
    test_deepseek_v32,
    test_glm45,
    test_glm47,
    test_gpt_oss,
    test_minimax_m2,
    test_qwen3_coder,
    test_seed_oss,
    test_step3,
)
from .harness import (
    PROPERTY_SETTINGS,
    Call,
    Render,
    arguments,
    assert_calls,
    assert_cut_off_consistent,
    assert_no_text_lost,
    assert_stream_matches_complete,
    calls,
    chunk_sizes,
    json_values,
    make_parser,
    names,
    noisy_text,
    plain_text,
    tools_for,
)

RENDERS: dict[str, Render] = {
    "qwen3_coder": test_qwen3_coder.render,
    "seed_oss": test_seed_oss.render,
    "glm45": test_glm45.render,
    "glm47": test_glm47.render,
    "step3": test_step3.render,
    "minimax_m2": test_minimax_m2.render,
    "deepseek_v32": test_deepseek_v32.render,
    "deepseek_v4": test_deepseek_v4.render,
}
XML_PARSERS = sorted(RENDERS)
FEW = settings(PROPERTY_SETTINGS, max_examples=30)
#: Formats that infer only scalars without a schema: their objects and arrays are declared.
TYPED_CONTAINERS = {"minimax_m2"}
#: Formats that trim string values at both ends.
STRIPPED = {"qwen3_coder"}


def raw_value(value: Any) -> str:
    """How XML formats write a value: strings raw, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _schema(value: Any, containers: bool) -> dict[str, str]:
    if isinstance(value, str):
        return {"type": "string"}
    if containers and isinstance(value, dict | list):
        return {"type": "object" if isinstance(value, dict) else "array"}
    return {}


def schema_tools(calls: list[Call], parser_name: str = "") -> list[dict[str, Any]]:
    """Tools for ``calls``: string values declared as strings, other values untyped (objects and
    arrays declared for :data:`TYPED_CONTAINERS`)."""
    tools = []
    containers = parser_name in TYPED_CONTAINERS
    for name, args in calls:
        props = {k: _schema(v, containers) for k, v in args.items()}
        tools.append(
            {
                "type": "function",
                "function": {"name": name, "parameters": {"type": "object", "properties": props}},
            }
        )
    return tools


def tags(parser_name: str) -> tuple[str, ...]:
    """Every tag of an XML format (for generated text and values to avoid)."""
    parser = make_parser(parser_name)
    assert isinstance(parser, XmlToolParser)
    syn = parser.syntax
    return (
        *syn.text_markers,
        *syn.block_markers,
        *syn.header_ends,
        *syn.body_markers,
        *syn.value_markers,
        *(syn.value_start or "",),
    )


_KEYS = st.text("abcxyz_019-é中", min_size=1, max_size=8)
_ARGS = st.dictionaries(_KEYS, json_values(max_leaves=6), max_size=4)
_CALLS = st.lists(st.tuples(names(), _ARGS), min_size=1, max_size=3, unique_by=lambda c: c[0])


def expected(parser_name: str, calls: list[Call]) -> list[Call]:
    """The calls a parser returns for rendered ``calls`` (string values trimmed if it trims)."""
    if parser_name not in STRIPPED:
        return calls
    return [
        (name, {k: v.strip() if isinstance(v, str) else v for k, v in args.items()})
        for name, args in calls
    ]


def _clean(parser_name: str, calls: list[Call]) -> bool:
    bad = [t for t in tags(parser_name) if t]
    return not any(t in raw_value(v) for _, args in calls for v in args.values() for t in bad)


@pytest.mark.parametrize("parser_name", XML_PARSERS)
@FEW
@given(data=st.data(), calls=_CALLS, sizes=chunk_sizes())
def test_rendered_calls_round_trip(
    parser_name: str, data: Any, calls: list[Call], sizes: list[int]
) -> None:
    assume(_clean(parser_name, calls))
    before = data.draw(plain_text(avoid=("<",)), label="before")
    after = data.draw(plain_text(avoid=("<",)), label="after")
    text = before + RENDERS[parser_name](calls) + after
    tools = schema_tools(calls, parser_name)
    result = assert_stream_matches_complete(parser_name, text, tools, [sizes, (1,)])
    assert_calls(result, expected(parser_name, calls))
    assert result.normal_text == before + after


def render_glm_escaped(calls: list[Call]) -> str:
    """GLM output with the line breaks written as the two characters ``\\n`` and objects and
    arrays as backslash-escaped JSON (as GLM models sometimes do)."""
    blocks = []
    for name, args in calls:
        pairs = "".join(
            f"<arg_key>{k}</arg_key>\\n<arg_value>{_escaped(v)}</arg_value>\\n"
            for k, v in args.items()
        )
        blocks.append(f"<tool_call>{name}\\n{pairs}</tool_call>")
    return "\\n".join(blocks)


def _escaped(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(json.dumps(value, ensure_ascii=False), ensure_ascii=False)[1:-1]
    return raw_value(value)


@pytest.mark.parametrize("parser_name", ["glm45", "glm47"])
@FEW
@given(data=st.data(), calls=_CALLS, sizes=chunk_sizes())
def test_glm_escaped_separators_and_json_round_trip(
    parser_name: str, data: Any, calls: list[Call], sizes: list[int]
) -> None:
    assume(_clean(parser_name, calls))
    before = data.draw(plain_text(avoid=("<", "\\")), label="before")
    after = data.draw(plain_text(avoid=("<", "\\")), label="after")
    text = before + render_glm_escaped(calls) + after
    tools = schema_tools(calls, parser_name)
    result = assert_stream_matches_complete(parser_name, text, tools, [sizes, (1,)])
    assert_calls(result, calls)
    assert result.normal_text == before + after


@pytest.mark.parametrize("parser_name", XML_PARSERS)
@FEW
@given(call=st.tuples(names(), _ARGS), sizes=chunk_sizes())
def test_unknown_function_stays_text(parser_name: str, call: Call, sizes: list[int]) -> None:
    assume(_clean(parser_name, [call]))
    text = "Sure. " + RENDERS[parser_name]([call]) + " Done."
    tools = tools_for([call[0] + "_other"])
    result = assert_stream_matches_complete(parser_name, text, tools, [sizes, (1,)])
    assert result.calls == []
    assert result.normal_text == text


@pytest.mark.parametrize("parser_name", XML_PARSERS)
@FEW
@given(data=st.data())
def test_noise_never_raises_or_loses_text(parser_name: str, data: Any) -> None:
    fragments = [t for t in tags(parser_name) if t]
    fragments += [
        "f",
        "get_weather",
        ' name="f"',
        'name="f"',
        "k",
        ">",
        "\n",
        "=",
        ' string="true"',
    ]
    text = data.draw(noisy_text(fragments, max_size=16))
    tools = data.draw(st.sampled_from([None, tools_for(["f", "get_weather"])]))
    assert_no_text_lost(parser_name, text, tools)


@pytest.mark.parametrize("parser_name", XML_PARSERS)
@FEW
@given(text=st.text(max_size=60))
def test_arbitrary_text_is_kept(parser_name: str, text: str) -> None:
    assert_no_text_lost(parser_name, text)


_TYPICAL: list[Call] = [
    ("get_weather", {"city": "Paris\n", "days": 3}),
    ("search", {"q": {"a": [1]}}),
]


@pytest.mark.parametrize("parser_name", [*XML_PARSERS, "gpt_oss"])
def test_every_end_point_is_consistent(parser_name: str) -> None:
    """Output ending at any point: only complete calls are calls and an open call's text is kept
    (streaming == one-shot); cut off by the token limit, the open call is added as received."""
    render = RENDERS.get(parser_name, test_gpt_oss.render)
    text = "Hi.\n" + render(_TYPICAL) + "\nBye."
    tools = schema_tools(_TYPICAL, parser_name)
    want = expected(parser_name, _TYPICAL)
    for cut in range(len(text) + 1):
        result = assert_stream_matches_complete(parser_name, text[:cut], tools, [(1,), (3, 5)])
        calls = result.calls
        if parser_name == "gpt_oss" and _BLANK_BODY.search(text[:cut]):
            assert calls[-1].arguments == "{}"  # a blank body: a call without arguments
            calls = calls[:-1]
        assert_calls(ToolParseResult("", calls), want[: len(calls)])
        cut_off = assert_cut_off_consistent(parser_name, text[:cut], tools, [(1,), (3, 5)])
        if len(cut_off.calls) > len(result.calls):  # a call was open at the cut: kept as text
            assert cut_off.calls[-1].name == want[len(calls)][0]
            assert result.normal_text.endswith(text[cut - 1 : cut])
    assert len(result.calls) == len(_TYPICAL)


_BLANK_BODY = re.compile(r"<\|message\|>\s*\Z")


# --- gpt-oss (harmony) -------------------------------------------------------------------------

_HARMONY = ("<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>")
_HARMONY_TEXT = plain_text(avoid=("<|",), alphabet="abc XYZ 019\n\t.,:!?'-_(){}<|>é中🙂")


@FEW
@given(data=st.data(), calls=calls(), sizes=chunk_sizes())
def test_gpt_oss_rendered_calls_round_trip(data: Any, calls: list[Call], sizes: list[int]) -> None:
    assume("<|" not in json.dumps(calls, ensure_ascii=False))  # tokens cannot occur in a body
    before = data.draw(_HARMONY_TEXT, label="before")
    after = data.draw(_HARMONY_TEXT, label="after")
    final = f"<|start|>assistant<|channel|>final<|message|>{after}<|return|>"
    analysis = f"<|channel|>analysis<|message|>{before}<|end|>"
    text = analysis + before + test_gpt_oss.render(calls) + final
    result = assert_stream_matches_complete("gpt_oss", text, None, [sizes, (1,)])
    assert_calls(result, calls)
    assert result.normal_text == before + after


@FEW
@given(args=arguments(), sizes=chunk_sizes())
def test_gpt_oss_unknown_function_body_is_text(args: dict[str, Any], sizes: list[int]) -> None:
    assume("<|" not in json.dumps(args, ensure_ascii=False))
    text = test_gpt_oss.render([("other", args)])
    result = assert_stream_matches_complete("gpt_oss", text, tools_for(["f"]), [sizes, (1,)])
    assert result.calls == []
    assert result.normal_text == json.dumps(args, ensure_ascii=False)


@FEW
@given(text=_HARMONY_TEXT)
def test_gpt_oss_text_without_tokens_is_content(text: str) -> None:
    assert_no_text_lost("gpt_oss", text)


@FEW
@given(data=st.data())
def test_gpt_oss_noise_never_raises(data: Any) -> None:
    fragments = [
        *_HARMONY,
        "<|call|>",
        "analysis",
        "final",
        "commentary",
        " to=functions.f",
        "json",
    ]
    text = data.draw(noisy_text(fragments, max_size=16))
    tools = data.draw(st.sampled_from([None, tools_for(["f"])]))
    assert_stream_matches_complete("gpt_oss", text, tools, ((1,), (3, 1, 4), (999,)))


@FEW
@given(
    pieces=st.lists(st.sampled_from([*_HARMONY, "<|call|>", "final", " to=functions.f", "{}", "x"]))
)
def test_gpt_oss_tokens_never_leak(pieces: list[str]) -> None:
    result = assert_stream_matches_complete("gpt_oss", "".join(pieces), None, ((1,), (999,)))
    for token in (*_HARMONY, "<|call|>"):
        assert token not in result.normal_text
