"""The tool-parser test harness: :mod:`turnout.testing` (the public harness plugin authors use)
applied to the built-in parsers by registered name, plus helpers for rendered outputs.

Every parser test module uses these helpers; the API is stable (the XML-family tests use it too):

* :func:`make_parser` - a fresh instance through the plugin registry (``tool_parsers.create``).
* :func:`split` / :func:`stream` - cut a text into chunks and fold the incremental steps.
* :func:`assert_stream_matches_complete` - the core invariant
  (``turnout.testing.assert_chunking_invariant``): for the given chunkings the folded streaming
  result equals ``parse_complete``; also checks the delta protocol (index order, each call
  released whole in one delta with its name, as every built-in does) and that every returned
  call's arguments are valid JSON.
* :func:`assert_cut_off_consistent` - the same invariant for an output cut off by the token
  limit (``finish(truncated=True)``).
* :func:`assert_calls` - compare calls with expected ``(name, arguments dict)`` pairs.
* :func:`check_rendered` - a rendered output with surrounding text: calls found exactly, text
  kept exactly, streaming == one-shot for several chunkings.
* hypothesis strategies (from ``turnout.testing.strategies``): :func:`names`,
  :func:`json_values`, :func:`arguments`, :func:`calls`, :func:`plain_text`, :func:`noisy_text`,
  :func:`chunk_sizes`.

A parser test module exports ``render(calls: list[tuple[str, dict]]) -> str`` for its format.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from hypothesis import HealthCheck, settings

import turnout
from turnout import testing
from turnout.plugin_loader import Plugins
from turnout.testing import DEFAULT_CHUNKINGS, split, tools_for
from turnout.testing.strategies import (
    Call,
    arguments,
    calls,
    chunk_sizes,
    json_values,
    names,
    noisy_text,
    plain_text,
)
from turnout.tool_calls.types import ToolCall, ToolParser, ToolParseResult, ToolParseStep, Tools

__all__ = [
    "DEFAULT_CHUNKINGS",
    "PROPERTY_SETTINGS",
    "Call",
    "Render",
    "arguments",
    "as_call",
    "assert_calls",
    "assert_cut_off_consistent",
    "assert_no_text_lost",
    "assert_stream_matches_complete",
    "calls",
    "check_rendered",
    "chunk_sizes",
    "dumps",
    "json_values",
    "make_parser",
    "names",
    "noisy_text",
    "plain_text",
    "split",
    "stream",
    "timed_stream",
    "tools_for",
]

Render = Callable[[list[Call]], str]

#: Settings for property tests: modest example counts, no deadline (CI machines are slow).
PROPERTY_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@cache
def _plugins() -> Plugins:
    return turnout.load_plugins()


def make_parser(parser_name: str) -> ToolParser:
    """A fresh parser instance, created the way the server creates it."""
    return _plugins().tool_parsers.create(parser_name)


def factory(parser_name: str) -> Callable[[], ToolParser]:
    """Fresh instances of a registered parser, named after it in assertion messages."""

    def create() -> ToolParser:
        return make_parser(parser_name)

    create.__name__ = parser_name
    return create


def stream(
    parser_name: str, chunks: Sequence[str], tools: Tools = None, truncated: bool = False
) -> tuple[ToolParseResult, list[ToolParseStep]]:
    """Feed ``chunks`` to a fresh parser, then ``finish``; return the fold and the raw steps."""
    return testing.run_tool_parser(make_parser(parser_name), chunks, tools, truncated=truncated)


def timed_stream(
    parser_name: str, chunks: Sequence[str], tools: Tools = None, repeat: int = 3
) -> tuple[ToolParseResult, float]:
    """:func:`stream` and its shortest CPU time in seconds over ``repeat`` runs, with the
    garbage collector paused: the steps kept for folding would otherwise make the collector,
    not the parser, dominate long inputs. CPU time of this thread, not wall time: on a busy
    machine a long run is preempted more often than a short one, which skews their ratio."""
    best = math.inf
    gc.disable()
    try:
        for _ in range(repeat):
            start = time.thread_time()
            folded, _ = stream(parser_name, chunks, tools)
            best = min(best, time.thread_time() - start)
        return folded, best
    finally:
        gc.enable()


def assert_stream_matches_complete(
    parser_name: str,
    text: str,
    tools: Tools = None,
    chunk_sizes: Sequence[int] | Sequence[Sequence[int]] = (1,),
) -> ToolParseResult:
    """Check streaming == ``parse_complete`` for one or several chunkings; return the result.

    ``chunk_sizes`` is either one chunking (``(1,)``, ``(3, 1, 4)``) or a sequence of them.
    """
    chunkings: list[Sequence[int]]
    if chunk_sizes and isinstance(chunk_sizes[0], int):
        chunkings = [chunk_sizes]  # type: ignore[list-item]
    else:
        chunkings = list(chunk_sizes)  # type: ignore[arg-type]
    return testing.assert_chunking_invariant(
        factory(parser_name), text, tools=tools, chunkings=chunkings, whole_calls=True
    )


def assert_cut_off_consistent(
    parser_name: str,
    text: str,
    tools: Tools = None,
    chunkings: Sequence[Sequence[int]] = DEFAULT_CHUNKINGS,
) -> ToolParseResult:
    """``text`` as an output cut off by the token limit: every chunking folds to the same result
    (returned), under the same delta protocol; the calls complete before the cut are exactly
    those of the uncut parse of the same text (only a call still open at the cut is added)."""
    return testing.assert_cut_off_consistent(
        factory(parser_name), text, tools=tools, chunkings=chunkings, whole_calls=True
    )


def assert_calls(result: ToolParseResult, expected: Sequence[Call]) -> None:
    """The result holds exactly ``expected`` calls (names, and arguments equal as JSON)."""
    got = [(c.name, json.loads(c.arguments)) for c in result.calls]
    assert got == [(n, a) for n, a in expected], f"calls {got!r} != expected {list(expected)!r}"


def check_rendered(
    parser_name: str,
    render: Render,
    calls: list[Call],
    *,
    before: str = "",
    after: str = "",
    tools: Tools = None,
    chunkings: Sequence[Sequence[int]] = DEFAULT_CHUNKINGS,
    expected_text: str | None = None,
) -> ToolParseResult:
    """``before + render(calls) + after`` parses to exactly ``calls`` and the text around them.

    ``expected_text`` defaults to ``before + after``.
    """
    text = before + render(calls) + after
    result = assert_stream_matches_complete(parser_name, text, tools, chunkings)
    assert_calls(result, calls)
    want = before + after if expected_text is None else expected_text
    assert result.normal_text == want, f"{parser_name}: normal text {result.normal_text!r}"
    return result


def assert_no_text_lost(parser_name: str, text: str, tools: Tools = None) -> ToolParseResult:
    """Arbitrary input: never raises, streaming == one-shot, and without calls the text is kept."""
    result = assert_stream_matches_complete(
        parser_name, text, tools, ((1,), (3, 1, 4), (len(text) or 1,))
    )
    if not result.calls:
        assert result.normal_text == text, f"{parser_name}: text lost: {result.normal_text!r}"
    return result


def as_call(name: str, arguments: dict[str, Any]) -> ToolCall:
    """A :class:`ToolCall` with ``json.dumps`` arguments (for exact comparisons)."""
    return ToolCall(name, json.dumps(arguments, ensure_ascii=False))


def dumps(value: Any, compact: bool = False) -> str:
    """JSON text as models write it (``ensure_ascii=False``; compact or with spaces)."""
    if compact:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value, ensure_ascii=False)


def raw_value(value: Any) -> str:
    """An argument value as XML-style formats write it: strings bare, anything else as JSON."""
    return value if isinstance(value, str) else dumps(value)


def typed_tool(name: str, **properties: str) -> dict[str, Any]:
    """An OpenAI tool definition for ``name`` whose parameters have the given JSON types (the
    XML-style parsers convert values by them), e.g. ``typed_tool("f", city="string")``."""
    typed = {key: {"type": kind} for key, kind in properties.items()}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": typed}},
    }
