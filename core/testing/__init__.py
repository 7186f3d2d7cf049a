"""Test helpers for parser plugins: prove that streaming and one-shot parsing agree.

turnout answers both streaming and non-streaming requests from a parser's incremental path
(``parse_incremental`` then ``finish``), while ``/parse/*`` and the folding checks use
``parse_complete``. A parser is correct only if, for every way the output can arrive in chunks,
the folded incremental steps equal ``parse_complete`` of the whole text::

    from turnout.testing import assert_chunking_invariant

    def test_stream_equals_one_shot():
        assert_chunking_invariant(MyParser, 'Hi.\\nCALL f {"x": 1}\\n', tools=tools_for(["f"]))

``MyParser`` is any factory returning a fresh parser (the class, or ``functools.partial(MyThink,
start_in_reasoning=True)`` for a reasoning parser); tool and reasoning parsers are told apart by
``parse_complete``'s signature. With hypothesis installed (``pip install 'turnout[testing]'``),
:func:`chunking_property` builds a property test over random texts and chunkings, and
:mod:`turnout.testing.strategies` has the generators turnout's own parser tests use.

turnout's built-in parsers are tested with exactly these helpers. For the other kinds of plugin:

* :mod:`turnout.testing.policies` - candidates and routing requests for a policy's unit tests;
* :mod:`turnout.testing.discovery` - collect what a discovery provider's ``watch()`` emits;
* :mod:`turnout.testing.router` and the pytest plugin :mod:`turnout.testing.pytest_plugin`
  (fixture ``turnout_router``) - the real router with your plugin in front of simulated workers.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, overload

from turnout.reasoning.types import ReasoningParser, ReasoningResult
from turnout.tool_calls.types import (
    ToolParser,
    ToolParseResult,
    ToolParseStep,
    Tools,
    fold_steps,
)

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

__all__ = [
    "DEFAULT_CHUNKINGS",
    "assert_chunking_invariant",
    "assert_cut_off_consistent",
    "check_tool_deltas",
    "chunking_property",
    "run_reasoning_parser",
    "run_tool_parser",
    "split",
    "tools_for",
]

#: Chunk-size cycles checked by default: one character at a time, two, an irregular cycle,
#: seven, and the whole text in one piece.
DEFAULT_CHUNKINGS: tuple[tuple[int, ...], ...] = ((1,), (2,), (3, 1, 4), (7,), (1_000_000,))

#: Chunk-size cycles: each chunking is a sequence of sizes, repeated until the text is used up.
Chunkings = Iterable[Sequence[int]]


def split(text: str, chunk_sizes: Sequence[int]) -> list[str]:
    """Cut ``text`` into chunks whose sizes cycle through ``chunk_sizes`` (sizes below 1
    count as 1)."""
    sizes = [max(1, size) for size in chunk_sizes] or [1]
    chunks: list[str] = []
    pos = i = 0
    while pos < len(text):
        size = sizes[i % len(sizes)]
        chunks.append(text[pos : pos + size])
        pos += size
        i += 1
    return chunks


def tools_for(function_names: Iterable[str]) -> list[dict[str, Any]]:
    """OpenAI tool definitions offering ``function_names`` (open-ended object parameters)."""
    return [
        {
            "type": "function",
            "function": {"name": n, "parameters": {"type": "object", "properties": {}}},
        }
        for n in function_names
    ]


def run_tool_parser(
    parser: ToolParser, chunks: Iterable[str], tools: Tools = None, *, truncated: bool = False
) -> tuple[ToolParseResult, list[ToolParseStep]]:
    """Feed ``chunks`` to ``parser`` as turnout does, then ``finish``; return the folded
    result and the raw steps. ``truncated`` ends as an output cut off by the token limit
    (``finish(truncated=True)``, as turnout calls it)."""
    steps = [parser.parse_incremental(chunk, tools) for chunk in chunks]
    steps.append(parser.finish(truncated=truncated))
    return fold_steps(steps), steps


def run_reasoning_parser(parser: ReasoningParser, chunks: Iterable[str]) -> ReasoningResult:
    """Feed ``chunks`` to ``parser``, then ``finish``; return everything it released."""
    reasoning: list[str] = []
    normal: list[str] = []
    for chunk in chunks:
        step = parser.parse_incremental(chunk)
        reasoning.append(step.reasoning_text)
        normal.append(step.normal_text)
    tail = parser.finish()
    reasoning.append(tail.reasoning_text)
    normal.append(tail.normal_text)
    return ReasoningResult("".join(reasoning), "".join(normal))


def check_tool_deltas(steps: Sequence[ToolParseStep], *, whole_calls: bool = False) -> None:
    """The delta protocol of a tool parser's steps: calls start in index order, a call's first
    delta carries its name and later ones do not. ``whole_calls`` demands what turnout's
    built-in parsers do: each call in a single delta (released once it is known valid)."""
    seen: set[int] = set()
    for number, step in enumerate(steps):
        assert isinstance(step.normal_text, str), f"step {number}: normal_text is not a str"
        for delta in step.calls:
            where = f"step {number}, call {delta.index}"
            if delta.index in seen:
                assert not whole_calls, f"{where}: call sent in pieces"
                assert delta.name is None, f"{where}: name sent again"
                continue
            assert delta.index == len(seen), f"{where}: index after {len(seen)} calls started"
            assert delta.name, f"{where}: the first delta of a call has no name"
            seen.add(delta.index)


def _label(factory: Callable[[], object], parser: object) -> str:
    return getattr(factory, "__name__", None) or type(parser).__name__


def _is_tool_parser(parser: object) -> bool:
    """Tool parsers take ``(text, tools)``, reasoning parsers ``(text)``."""
    parse_complete = getattr(parser, "parse_complete", None)
    if parse_complete is None:
        raise TypeError(f"{type(parser).__name__} has no parse_complete: not a parser")
    try:
        return len(inspect.signature(parse_complete).parameters) >= 2
    except (TypeError, ValueError):
        return hasattr(parser, "call_id_style")


@overload
def assert_chunking_invariant(
    factory: Callable[[], ToolParser],
    text: str,
    *,
    tools: Tools = None,
    chunkings: Chunkings = DEFAULT_CHUNKINGS,
    whole_calls: bool = False,
) -> ToolParseResult: ...


@overload
def assert_chunking_invariant(
    factory: Callable[[], ReasoningParser],
    text: str,
    *,
    chunkings: Chunkings = DEFAULT_CHUNKINGS,
) -> ReasoningResult: ...


@overload
def assert_chunking_invariant(
    factory: Callable[[], object],
    text: str,
    *,
    tools: Tools = None,
    chunkings: Chunkings = DEFAULT_CHUNKINGS,
    whole_calls: bool = False,
) -> ToolParseResult | ReasoningResult: ...


def assert_chunking_invariant(
    factory: Callable[[], Any],
    text: str,
    *,
    tools: Tools = None,
    chunkings: Chunkings = DEFAULT_CHUNKINGS,
    whole_calls: bool = False,
) -> ToolParseResult | ReasoningResult:
    """Assert that ``text`` streamed in every one of ``chunkings`` (each through a fresh parser
    from ``factory``) folds to exactly ``parse_complete(text)``; return that result.

    For a tool parser it also checks the delta protocol (:func:`check_tool_deltas`) and that
    every call has a name and JSON arguments. ``tools`` is what the request offered.
    """
    probe = factory()
    label = _label(factory, probe)
    if not _is_tool_parser(probe):
        split_once: ReasoningResult = probe.parse_complete(text)
        for sizes in chunkings:
            released = run_reasoning_parser(factory(), split(text, sizes))
            assert released == split_once, _differs(label, sizes, text, released, split_once)
        return split_once
    complete: ToolParseResult = probe.parse_complete(text, tools)
    for call in complete.calls:
        assert call.name, f"{label}: a call without a name in {complete!r}"
        try:
            json.loads(call.arguments)
        except ValueError:
            raise AssertionError(f"{label}: arguments are not JSON: {call.arguments!r}") from None
    for sizes in chunkings:
        folded, steps = run_tool_parser(factory(), split(text, sizes), tools)
        try:
            check_tool_deltas(steps, whole_calls=whole_calls)
        except AssertionError as exc:
            raise AssertionError(f"{label}, chunk sizes {tuple(sizes)}: {exc}") from None
        assert folded == complete, _differs(label, sizes, text, folded, complete)
    return complete


def assert_cut_off_consistent(
    factory: Callable[[], ToolParser],
    text: str,
    *,
    tools: Tools = None,
    chunkings: Chunkings = DEFAULT_CHUNKINGS,
    whole_calls: bool = False,
) -> ToolParseResult:
    """``text`` as an output cut off by the token limit (``finish(truncated=True)``): every
    chunking folds to the same result (returned) under the delta protocol, the calls complete
    before the cut are exactly those of ``parse_complete``, and at most the one call still open
    at the cut is added."""
    probe = factory()
    label = _label(factory, probe)
    whole, _ = run_tool_parser(probe, [text], tools, truncated=True)
    for sizes in chunkings:
        folded, steps = run_tool_parser(factory(), split(text, sizes), tools, truncated=True)
        check_tool_deltas(steps, whole_calls=whole_calls)
        assert folded == whole, _differs(label, sizes, text, folded, whole, what="cut-off output")
    complete = factory().parse_complete(text, tools)
    assert whole.calls[: len(complete.calls)] == complete.calls, (
        f"{label}: the cut-off output lost complete calls\n{whole!r}\n{complete!r}"
    )
    if len(whole.calls) == len(complete.calls):
        assert whole == complete, f"{label}: no call open at the cut, yet the results differ"
    else:
        assert len(whole.calls) == len(complete.calls) + 1, f"{label}: more than one open call"
    return whole


def _differs(
    label: str, sizes: Sequence[int], text: str, got: object, want: object, *, what: str = "stream"
) -> str:
    return (
        f"{label}: {what} with chunk sizes {tuple(sizes)} differs from one-shot\n"
        f"text:     {text!r}\nstream:   {got!r}\none-shot: {want!r}"
    )


def chunking_property(
    factory: Callable[[], Any],
    texts: SearchStrategy[str],
    *,
    tools: Tools = None,
    max_examples: int = 100,
    whole_calls: bool = False,
) -> Callable[[], None]:
    """A hypothesis test: for texts drawn from ``texts`` and random chunkings (plus one
    character at a time and the whole text at once), :func:`assert_chunking_invariant` holds.
    Assign it to a ``test_`` name in a test module::

        test_chunking = chunking_property(MyParser, marker_text(["CALL ", "\\n", "{"]))

    Needs hypothesis (``pip install 'turnout[testing]'``).
    """
    # Strategies first: without hypothesis, their ImportError says what to install.
    from turnout.testing.strategies import chunk_sizes  # noqa: I001
    from hypothesis import HealthCheck, given, settings

    @settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        report_multiple_bugs=False,
    )
    @given(text=texts, sizes=chunk_sizes())
    def check(text: str, sizes: list[int]) -> None:
        assert_chunking_invariant(
            factory,
            text,
            tools=tools,
            chunkings=[sizes, (1,), (len(text) or 1,)],
            whole_calls=whole_calls,
        )

    return check
