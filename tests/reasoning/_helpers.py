"""Shared helpers for reasoning parser tests: streaming drivers and an independent oracle."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

import turnout
from turnout.reasoning import MarkerReasoningParser, ReasoningParser, ReasoningResult

PLUGINS = turnout.load_plugins()
REGISTRY = PLUGINS.reasoning_parsers


def make(name: str, start_in_reasoning: bool | None = None) -> ReasoningParser:
    """A fresh parser from the real registry."""
    return REGISTRY.create(name, start_in_reasoning=start_in_reasoning)


def stream(parser: ReasoningParser, chunks: Iterable[str]) -> ReasoningResult:
    """Feed ``chunks`` one by one, then finish; concatenate what was released."""
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


def split_at(text: str, cuts: Iterable[int]) -> list[str]:
    """``text`` cut at the given offsets (duplicates and order do not matter)."""
    points = [0, *sorted(set(cuts)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(points)]


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
