"""Shared helpers for reasoning parser tests: built-in parsers by name and an independent oracle.

The streaming driver and the chunking invariant are :mod:`turnout.testing`'s (the public harness
plugin authors use): ``run_reasoning_parser`` and ``assert_chunking_invariant``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable

import turnout
from turnout.reasoning import MarkerReasoningParser, ReasoningParser

PLUGINS = turnout.load_plugins()
REGISTRY = PLUGINS.reasoning_parsers


def make(name: str, start_in_reasoning: bool | None = None) -> ReasoningParser:
    """A fresh parser from the real registry."""
    return REGISTRY.create(name, start_in_reasoning=start_in_reasoning)


def factory(name: str, start_in_reasoning: bool | None = None) -> Callable[[], ReasoningParser]:
    """Fresh instances of a registered parser, named after it in assertion messages."""

    def create() -> ReasoningParser:
        return make(name, start_in_reasoning)

    create.__name__ = f"{name}(start_in_reasoning={start_in_reasoning})"
    return create


def sizes_at(length: int, cuts: Iterable[int]) -> list[int]:
    """Chunk sizes that cut a text of ``length`` characters at the given offsets (duplicates
    and order do not matter): ``turnout.testing.split(text, sizes_at(len(text), cuts))``."""
    points = [0, *sorted({c for c in cuts if 0 < c < length}), length]
    return [b - a for a, b in itertools.pairwise(points)] or [1]


def _alternation(markers: Iterable[str]) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(m) for m in sorted(markers, key=len, reverse=True)))


def oracle_segments(
    cls: type[MarkerReasoningParser], text: str, reasoning_first: bool
) -> list[tuple[str, str]]:
    """Split ``text`` by the documented rules, written independently of the parser.

    Returns ``(kind, text)`` segments with kind ``"r"`` (reasoning), ``"n"`` (normal) or ``"m"``
    (a removed marker); the segments always concatenate back to ``text``.
    """
    starts = cls.start_markers or (cls.start_marker,)
    stops = _alternation((*cls.end_markers, *cls.interrupt_markers))
    segments: list[tuple[str, str]] = []
    if cls.reopens:
        opens = _alternation(starts)
        in_reasoning, pos = reasoning_first, 0
        while True:
            match = (stops if in_reasoning else opens).search(text, pos)
            kind = "r" if in_reasoning else "n"
            if match is None:
                segments.append((kind, text[pos:]))
                return segments
            segments.append((kind, text[pos : match.start()]))
            if in_reasoning and match.group() not in cls.end_markers:
                pos = match.start()  # an interrupt marker stays in the normal text
            else:
                segments.append(("m", match.group()))
                pos = match.end()
            in_reasoning = not in_reasoning
    if reasoning_first:
        body = text.lstrip()
        segments.append(("r", text[: len(text) - len(body)]))
        start = next((m for m in starts if body.startswith(m)), None)
        if start is not None:
            segments.append(("m", start))
            body = body[len(start) :]
    else:
        opened = _alternation(starts).search(text)
        if opened is None:
            return [("n", text)]
        segments += [("n", text[: opened.start()]), ("m", opened.group())]
        body = text[opened.end() :]
    match = stops.search(body)
    if match is None:
        segments.append(("r", body))
    elif match.group() in cls.end_markers:
        segments += [("r", body[: match.start()]), ("m", match.group()), ("n", body[match.end() :])]
    else:
        segments += [("r", body[: match.start()]), ("n", body[match.start() :])]
    return segments
