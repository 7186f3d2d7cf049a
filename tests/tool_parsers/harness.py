"""Shared test harness for tool-call parsers.

Every parser test module uses these helpers; the API is stable (the XML-family tests use it too):

* :func:`make_parser` - a fresh instance through the plugin registry (``tool_parsers.create``).
* :func:`split` / :func:`stream` - cut a text into chunks and fold the incremental steps.
* :func:`assert_stream_matches_complete` - the core invariant: for the given chunkings the folded
  streaming result equals ``parse_complete``; also checks the delta protocol (index order, each
  call released whole in one delta with its name) and that every returned call's arguments are
  valid JSON.
* :func:`assert_cut_off_consistent` - the same invariant for an output cut off by the token
  limit (``finish(truncated=True)``).
* :func:`assert_calls` - compare calls with expected ``(name, arguments dict)`` pairs.
* :func:`check_rendered` - a rendered output with surrounding text: calls found exactly, text
  kept exactly, streaming == one-shot for several chunkings.
* hypothesis strategies: :func:`names`, :func:`json_values`, :func:`arguments`, :func:`calls`,
  :func:`plain_text`, :func:`noisy_text`, :func:`chunk_sizes`.

A parser test module exports ``render(calls: list[tuple[str, dict]]) -> str`` for its format.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import turnout
from turnout.plugin_loader import Plugins
from turnout.tool_calls.types import (
    ToolCall,
    ToolParser,
    ToolParseResult,
    ToolParseStep,
    Tools,
    fold_steps,
)

Call = tuple[str, dict[str, Any]]
Render = Callable[[list[Call]], str]

#: Settings for property tests: modest example counts, no deadline (CI machines are slow).
PROPERTY_SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

#: Chunkings every example test runs: one character at a time, token-ish, odd sizes, whole text.
DEFAULT_CHUNKINGS: tuple[tuple[int, ...], ...] = ((1,), (2,), (3, 1, 4), (7,), (1_000_000,))


@cache
def _plugins() -> Plugins:
    return turnout.load_plugins()


def make_parser(parser_name: str) -> ToolParser:
    """A fresh parser instance, created the way the server creates it."""
    return _plugins().tool_parsers.create(parser_name)


def tools_for(function_names: Iterable[str]) -> list[dict[str, Any]]:
    """OpenAI tool definitions offering ``function_names`` (open-ended object parameters)."""
    return [
        {
            "type": "function",
            "function": {"name": n, "parameters": {"type": "object", "properties": {}}},
        }
        for n in function_names
    ]


def split(text: str, chunk_sizes: Sequence[int]) -> list[str]:
    """Cut ``text`` into chunks whose sizes cycle through ``chunk_sizes``."""
    sizes = [max(1, s) for s in chunk_sizes] or [1]
    chunks: list[str] = []
    pos = i = 0
    while pos < len(text):
        size = sizes[i % len(sizes)]
        chunks.append(text[pos : pos + size])
        pos += size
        i += 1
    return chunks


def _check_protocol(parser_name: str, steps: Sequence[ToolParseStep]) -> None:
    """Calls come in order, each released whole: one delta with its name and arguments (a call
    is only released once it is known to be valid)."""
    seen: set[int] = set()
    for step in steps:
        assert isinstance(step.normal_text, str)
        for delta in step.calls:
            assert delta.index not in seen, f"{parser_name}: call {delta.index} sent in pieces"
            assert delta.index == len(seen), (
                f"{parser_name}: call index {delta.index} after {len(seen)} calls"
            )
            assert delta.name, f"{parser_name}: call {delta.index} has no name"
            seen.add(delta.index)


def stream(
    parser_name: str, chunks: Sequence[str], tools: Tools = None, truncated: bool = False
) -> tuple[ToolParseResult, list[ToolParseStep]]:
    """Feed ``chunks`` to a fresh parser, then ``finish``; return the fold and the raw steps."""
    parser = make_parser(parser_name)
    steps = [parser.parse_incremental(chunk, tools) for chunk in chunks]
    steps.append(parser.finish(truncated=True) if truncated else parser.finish())
    return fold_steps(steps), steps


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
    complete = make_parser(parser_name).parse_complete(text, tools)
    for call in complete.calls:
        assert call.name, f"{parser_name}: empty call name in {complete}"
        try:
            json.loads(call.arguments)
        except ValueError as exc:  # pragma: no cover - the message is the point
            raise AssertionError(f"{parser_name}: arguments not JSON: {call.arguments!r}") from exc
    for sizes in chunkings:
        folded, steps = stream(parser_name, split(text, sizes), tools)
        _check_protocol(parser_name, steps)
        assert folded == complete, (
            f"{parser_name}: streaming with chunk sizes {tuple(sizes)} differs from one-shot\n"
            f"text: {text!r}\nstream:   {folded!r}\ncomplete: {complete!r}"
        )
    return complete


def assert_cut_off_consistent(
    parser_name: str,
    text: str,
    tools: Tools = None,
    chunkings: Sequence[Sequence[int]] = DEFAULT_CHUNKINGS,
) -> ToolParseResult:
    """``text`` as an output cut off by the token limit: every chunking folds to the same result
    (returned), under the same delta protocol; the calls complete before the cut are exactly
    those of the uncut parse of the same text (only a call still open at the cut is added)."""
    whole, _ = stream(parser_name, [text], tools, truncated=True)
    for sizes in chunkings:
        folded, steps = stream(parser_name, split(text, sizes), tools, truncated=True)
        _check_protocol(parser_name, steps)
        assert folded == whole, (
            f"{parser_name}: cut-off output with chunk sizes {tuple(sizes)} differs\n"
            f"text: {text!r}\nstream: {folded!r}\nwhole:  {whole!r}"
        )
    complete = make_parser(parser_name).parse_complete(text, tools)
    assert whole.calls[: len(complete.calls)] == complete.calls, (
        f"{parser_name}: cut-off output lost complete calls\n{whole!r}\n{complete!r}"
    )
    if len(whole.calls) == len(complete.calls):
        assert whole == complete, f"{parser_name}: no call open at the cut, yet results differ"
    else:
        assert len(whole.calls) == len(complete.calls) + 1
    return whole


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


# --- hypothesis strategies -------------------------------------------------------------------

_NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"


def names() -> st.SearchStrategy[str]:
    """Function names: an identifier, sometimes with ``-`` or ``.`` inside (MCP-style)."""
    ident = st.text(_NAME_ALPHABET, min_size=1, max_size=16).filter(lambda s: not s[0].isdigit())
    return st.one_of(
        ident,
        st.builds(lambda a, sep, b: f"{a}{sep}{b}", ident, st.sampled_from("-."), ident),
    )


_KEY = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8)
_STRING = st.text(
    st.one_of(
        st.sampled_from(list('abc xyz"\\/\n\t{}[]<>|:,;')),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=24,
)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values (unicode, escapes, nesting, numbers that survive a round trip)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        _STRING,
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(_KEY, inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def arguments() -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object of arguments (possibly empty)."""
    return st.dictionaries(_KEY, json_values(), max_size=5)


def calls(min_size: int = 1, max_size: int = 3) -> st.SearchStrategy[list[Call]]:
    """A list of ``(name, arguments)`` calls."""
    return st.lists(st.tuples(names(), arguments()), min_size=min_size, max_size=max_size)


def plain_text(
    avoid: Iterable[str] = (), alphabet: str | None = None, max_size: int = 30
) -> st.SearchStrategy[str]:
    """Prose around calls: letters, spaces, newlines, punctuation, unicode; never contains any
    string in ``avoid`` (a format's markers, or characters that start a bare call)."""
    bad = tuple(avoid)
    chars = alphabet or "abc XYZ 019\n\t.,:!?'-_()é中🙂"
    return st.text(chars, max_size=max_size).filter(lambda s: not any(b in s for b in bad))


def noisy_text(fragments: Iterable[str], max_size: int = 12) -> st.SearchStrategy[str]:
    """Arbitrary input built from a format's marker fragments, JSON-ish pieces and random text."""
    pieces = [*fragments, "{", "}", "[", "]", '"', ":", ",", "\\", "\n", " ", '{"name": "f"', "}}"]
    return st.lists(st.one_of(st.sampled_from(pieces), st.text(max_size=4)), max_size=max_size).map(
        "".join
    )


def chunk_sizes() -> st.SearchStrategy[list[int]]:
    """Chunkings: cycles of small chunk sizes (1 = one character at a time)."""
    return st.lists(st.integers(1, 9), min_size=1, max_size=5)


def dumps(value: Any, compact: bool = False) -> str:
    """JSON text as models write it (``ensure_ascii=False``; compact or with spaces)."""
    if compact:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return json.dumps(value, ensure_ascii=False)
