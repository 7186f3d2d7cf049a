"""MiniMax-M2: `<think>` … `</think>`; the template opens ``<think>`` in the prompt.

Two parsers:

- :class:`MiniMaxReasoningParser` separates reasoning (starts in reasoning).
- :class:`MiniMaxAppendThinkReasoningParser` does not separate: all text is normal text, with the
  ``<think>`` the prompt swallowed put back in front, so that clients keep the whole thinking in
  the conversation history (MiniMax recommends that for interleaved thinking).
"""

from __future__ import annotations

from typing import ClassVar

from turnout.reasoning.base import MarkerReasoningParser
from turnout.reasoning.types import ReasoningResult, ReasoningStep


class MiniMaxReasoningParser(MarkerReasoningParser):
    """MiniMax-M2: starts in reasoning; ``</think>`` ends it."""

    starts_in_reasoning = True


class MiniMaxAppendThinkReasoningParser:
    """MiniMax-M2 without separation: the output, prefixed with ``<think>``, is all normal text.

    The prefix is added when the output starts in reasoning (the default) and does not begin with
    ``<think>`` itself; an empty output stays empty.
    """

    start_marker: ClassVar[str] = "<think>"
    #: None: nothing is separated, so a prompt that closed reasoning changes nothing.
    end_markers: ClassVar[tuple[str, ...]] = ()
    needs_special_tokens: ClassVar[bool] = False

    __slots__ = ("_held", "_leading", "_prefix")

    def __init__(self, *, start_in_reasoning: bool | None = None) -> None:
        if start_in_reasoning is not None and not isinstance(start_in_reasoning, bool):
            raise TypeError(
                f"start_in_reasoning must be True, False or None, got {start_in_reasoning!r}"
            )
        self._prefix = start_in_reasoning is not False
        self._leading = True
        self._held = ""

    def parse_complete(self, text: str) -> ReasoningResult:
        """Return the whole output as normal text (with the ``<think>`` prefix when due)."""
        if self._prefix and text and not text.startswith(self.start_marker):
            return ReasoningResult("", self.start_marker + text)
        return ReasoningResult("", text)

    def parse_incremental(self, delta: str) -> ReasoningStep:
        """Pass text through; hold only the first characters while they could be ``<think>``."""
        if not self._leading:
            return ReasoningStep("", delta)
        text = self._held + delta
        if len(text) < len(self.start_marker) and self.start_marker.startswith(text):
            self._held = text
            return ReasoningStep()
        return self._release(text)

    def finish(self) -> ReasoningStep:
        """Release the first characters if the output was shorter than ``<think>``."""
        if not self._leading:
            return ReasoningStep()
        return self._release(self._held)

    def _release(self, text: str) -> ReasoningStep:
        self._leading = False
        self._held = ""
        return ReasoningStep("", self.parse_complete(text).normal_text)
