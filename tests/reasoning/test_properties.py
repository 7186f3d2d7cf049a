"""Property tests over every registered reasoning parser.

- Any chunking of the output (down to single characters) gives the one-shot split.
- Arbitrary text never raises.
- For marker parsers the split equals an independent oracle whose segments (reasoning, normal,
  removed markers) concatenate back to the input: nothing is lost or reordered.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnout.reasoning import MarkerReasoningParser, ReasoningResult
from turnout.reasoning.base import MarkerReasoningParser as Base
from turnout.testing import assert_chunking_invariant, run_reasoning_parser, split
from turnout.testing.strategies import marker_text

from ._helpers import REGISTRY, factory, make, oracle_segments, sizes_at

NAMES = REGISTRY.names()
STARTS = [None, True, False]
SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _markers(name: str) -> list[str]:
    cls = REGISTRY.factory(name)
    found = {getattr(cls, "start_marker", "")}
    if isinstance(cls, type) and issubclass(cls, Base):
        found |= {*cls.start_markers, *cls.end_markers, *cls.interrupt_markers}
    if name == "gpt_oss":
        found |= {"<|start|>assistant", "<|channel|>final<|message|>", "<|message|>"}
    return sorted(m for m in found if m)


def outputs(name: str) -> st.SearchStrategy[str]:
    """Text assembled from the family's markers, pieces of them, noise and arbitrary text."""
    return marker_text(_markers(name))


@st.composite
def output_and_cuts(draw: st.DrawFn, name: str) -> tuple[str, list[int]]:
    text = draw(outputs(name))
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=len(text)))
    return text, cuts


MARKER_NAMES = {
    n
    for n in NAMES
    if isinstance(REGISTRY.factory(n), type) and issubclass(REGISTRY.factory(n), Base)
}


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("name", NAMES)
def test_chunking_and_reconstruction(name: str, start: bool | None) -> None:
    """Chunked == one-shot for every parser; one-shot == oracle for marker parsers."""
    cls = REGISTRY.factory(name)

    @SETTINGS
    @given(output_and_cuts(name))
    def check(sample: tuple[str, list[int]]) -> None:
        text, cuts = sample
        whole = assert_chunking_invariant(
            factory(name, start), text, chunkings=[sizes_at(len(text), cuts), (1,)]
        )
        if name in MARKER_NAMES:
            assert issubclass(cls, MarkerReasoningParser)
            first = cls.starts_in_reasoning if start is None else start
            segments = oracle_segments(cls, text, first)
            assert "".join(part for _, part in segments) == text
            reasoning = "".join(p for k, p in segments if k == "r")
            normal = "".join(p for k, p in segments if k == "n")
            assert whole == ReasoningResult(reasoning, normal)

    check()


def test_append_think_keeps_every_byte() -> None:
    @SETTINGS
    @given(outputs("minimax_append_think"), st.lists(st.integers(0, 40), max_size=8))
    def check(text: str, cuts: list[int]) -> None:
        result = run_reasoning_parser(
            make("minimax_append_think"), split(text, sizes_at(len(text), cuts))
        )
        assert result.reasoning_text == ""
        if not text or text.startswith("<think>"):
            assert result.normal_text == text
        else:
            assert result.normal_text == "<think>" + text

    check()


@pytest.mark.parametrize("name", NAMES)
def test_arbitrary_text_never_raises(name: str) -> None:
    @settings(max_examples=30, deadline=None)
    @given(st.lists(st.text(), max_size=6))
    def check(chunks: list[str]) -> None:
        parser = make(name)
        result = run_reasoning_parser(parser, chunks)
        total = "".join(chunks)
        assert len(result.reasoning_text) + len(result.normal_text) <= len(total) + len("<think>")

    check()
