"""A generic reasoning parser driven by start/end markers, reused by every marker family.

Plugin authors describe a family with class attributes and inherit all the parsing::

    class MyReasoningParser(MarkerReasoningParser):
        start_marker = "<reason>"
        end_markers = ("</reason>",)
        starts_in_reasoning = False     # the family's default for start_in_reasoning=None

Rules, the same for one-shot (:meth:`~MarkerReasoningParser.parse_complete`) and streamed
(:meth:`~MarkerReasoningParser.parse_incremental`, then :meth:`~MarkerReasoningParser.finish`)
input, whatever the chunking:

- Output that starts outside reasoning is normal text until the first start marker, wherever
  it is (``normal text <think>reasoning`` gives normal ``normal text `` and reasoning
  ``reasoning``). The marker is removed and the output enters reasoning.
- Output that starts inside reasoning (the prompt opened the block) is reasoning from its first
  byte; a start marker at its beginning, after optional whitespace, is removed, and an end
  marker without a start marker therefore ends reasoning that the prompt opened.
- Inside reasoning, the first end marker is removed and ends reasoning; an interrupt marker (for
  example a tool-call or tool-section token) also ends reasoning but stays in the normal text,
  so that the tool parser sees it. Start markers inside reasoning are ordinary reasoning text.
- After reasoning ends the rest is normal text; a start marker there is ordinary text, unless
  the family's outputs hold several reasoning blocks (``reopens = True``, e.g. harmony).
- Without an end marker everything after the start is reasoning (a truncated output): nothing is
  lost, and whitespace is kept byte for byte.
- Text that may still become a marker (a strict prefix of one at the end of a chunk) is held
  back and released as soon as it cannot.

docs/reasoning.md lists the choices per family and where SGLang and vLLM differ.
"""

from __future__ import annotations

from typing import ClassVar

from turnout.reasoning.types import ReasoningResult, ReasoningStep
from turnout.tool_calls.markers import MarkerScanner

_LEADING = 0  # started in reasoning, no text but whitespace yet: a start marker may follow
_REASONING = 1  # inside reasoning: scanning for end and interrupt markers
_NORMAL = 2  # reasoning is over: plain pass-through
_SCANNING = 3  # normal text that may still open reasoning: scanning for start markers


def _check_markers(owner: str, kind: str, markers: tuple[str, ...]) -> None:
    """Reject marker sets that streaming could not split the same way as one-shot parsing.

    A marker that occurs inside another one other than as its suffix (for example as a prefix)
    could complete in a stream before the longer marker is known.
    """
    for marker in markers:
        if not isinstance(marker, str) or not marker:
            raise TypeError(f"{owner}.{kind}: markers must be non-empty strings, got {marker!r}")
    for outer in markers:
        for inner in markers:
            if inner == outer:
                continue
            pos = outer.find(inner)
            while pos >= 0:
                if pos + len(inner) != len(outer):
                    raise ValueError(
                        f"{owner}.{kind}: marker {inner!r} occurs inside {outer!r} other than "
                        "at its end; streamed and one-shot parsing could disagree"
                    )
                pos = outer.find(inner, pos + 1)


class MarkerReasoningParser:
    """Split one output into reasoning and normal text at textual start/end markers.

    Create one instance per output: ``MarkerReasoningParser(start_in_reasoning=None)``.
    Subclasses set the class attributes below; see the module docstring for the rules.
    """

    #: The marker that opens reasoning; the pipeline checks whether the prompt ends with it.
    start_marker: ClassVar[str] = "<think>"
    #: All markers that open reasoning; empty means ``(start_marker,)``.
    start_markers: ClassVar[tuple[str, ...]] = ()
    #: Markers that close reasoning; they are removed.
    end_markers: ClassVar[tuple[str, ...]] = ("</think>",)
    #: Markers that close reasoning and stay at the start of the normal text.
    interrupt_markers: ClassVar[tuple[str, ...]] = ()
    #: The family's default when ``start_in_reasoning`` is None.
    starts_in_reasoning: ClassVar[bool] = False
    #: True when start markers may open further reasoning blocks anywhere in the normal text.
    reopens: ClassVar[bool] = False
    #: True when the markers are special tokens that decoding must keep.
    needs_special_tokens: ClassVar[bool] = False

    _starts: ClassVar[tuple[str, ...]] = ("<think>",)
    _stops: ClassVar[tuple[str, ...]] = ("</think>",)

    __slots__ = ("_held", "_reasoning_first", "_scanner", "_state")

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        starts = cls.start_markers or (cls.start_marker,)
        if cls.start_marker not in starts:
            raise ValueError(f"{cls.__name__}: start_marker must be one of start_markers")
        for marker in starts:
            if isinstance(marker, str) and marker != marker.lstrip():
                raise ValueError(f"{cls.__name__}: start marker {marker!r} begins with whitespace")
        _check_markers(cls.__name__, "start_markers", starts)
        stops = (*cls.end_markers, *cls.interrupt_markers)
        if not cls.end_markers:
            raise ValueError(f"{cls.__name__}: end_markers must not be empty")
        _check_markers(cls.__name__, "end_markers + interrupt_markers", stops)
        cls._starts = starts
        cls._stops = stops

    def __init__(self, *, start_in_reasoning: bool | None = None) -> None:
        if start_in_reasoning is not None and not isinstance(start_in_reasoning, bool):
            raise TypeError(
                f"start_in_reasoning must be True, False or None, got {start_in_reasoning!r}"
            )
        self._reasoning_first = (
            self.starts_in_reasoning if start_in_reasoning is None else start_in_reasoning
        )
        self._held = ""
        self._scanner: MarkerScanner | None = None
        self._state = _LEADING
        if not self._reasoning_first:
            self._enter(_SCANNING)
        elif self.reopens:
            self._enter(_REASONING)

    @property
    def start_in_reasoning(self) -> bool:
        """Whether this output was taken to start inside reasoning."""
        return self._reasoning_first

    @property
    def in_reasoning(self) -> bool:
        """Whether the text consumed so far ends inside reasoning."""
        return self._state in (_LEADING, _REASONING)

    def parse_complete(self, text: str) -> ReasoningResult:
        """Split a whole output at once; the streaming state of this instance is untouched."""
        fresh = type(self)(start_in_reasoning=self._reasoning_first)
        step = fresh.parse_incremental(text)
        tail = fresh.finish()
        return ReasoningResult(
            step.reasoning_text + tail.reasoning_text, step.normal_text + tail.normal_text
        )

    def parse_incremental(self, delta: str) -> ReasoningStep:
        """Consume the next piece of output; return the reasoning and normal text it releases."""
        reasoning: list[str] = []
        normal: list[str] = []
        text = delta
        while True:
            state = self._state
            if state == _NORMAL:
                normal.append(text)
                break
            if state == _LEADING:
                rest = self._leading(text, reasoning)
                if rest is None:
                    break
                text = rest
                continue
            scanner = self._scanner
            assert scanner is not None
            released, marker = scanner.feed(text)
            (reasoning if state == _REASONING else normal).append(released)
            if marker is None:
                break
            text = scanner.rest
            if state == _SCANNING:
                self._enter(_REASONING)
            else:
                if marker not in self.end_markers:
                    text = marker + text  # an interrupt marker belongs to the normal text
                self._enter(_SCANNING if self.reopens else _NORMAL)
        return ReasoningStep("".join(reasoning), "".join(normal))

    def finish(self) -> ReasoningStep:
        """End of output: release held-back text to the side it was on."""
        if self._state == _LEADING:
            held, self._held = self._held, ""
            return ReasoningStep(held, "")
        if self._scanner is None:
            return ReasoningStep()
        return self._step(self._state == _REASONING, self._scanner.flush())

    def _leading(self, delta: str, reasoning: list[str]) -> str | None:
        """Handle the first text of an output that starts in reasoning: remove a start marker
        that comes before anything but whitespace. Return what the reasoning state gets."""
        text = self._held + delta
        self._held = ""
        body = text.lstrip()
        if len(body) != len(text):
            reasoning.append(text[: len(text) - len(body)])
        for marker in self._starts:
            if body.startswith(marker):
                self._enter(_REASONING)
                return body[len(marker) :]
        for marker in self._starts:
            if marker.startswith(body):
                self._held = body  # may still become a start marker
                return None
        self._enter(_REASONING)
        return body

    def _enter(self, state: int) -> None:
        self._state = state
        if state == _REASONING:
            self._scanner = MarkerScanner(self._stops)
        elif state == _SCANNING:
            self._scanner = MarkerScanner(self._starts)
        else:
            self._scanner = None

    @staticmethod
    def _step(is_reasoning: bool, text: str) -> ReasoningStep:
        return ReasoningStep(text, "") if is_reasoning else ReasoningStep("", text)
