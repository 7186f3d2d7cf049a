"""The public reasoning parser API: what a reasoning parser plugin implements and returns.

A reasoning parser splits one output into reasoning text (OpenAI ``reasoning_content``) and normal
text, before the tool parser sees the normal text. Instances serve one output and are created by
``load_plugins().reasoning_parsers.create(name, start_in_reasoning=...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable


@dataclass(slots=True)
class ReasoningResult:
    """Reasoning and normal text of a whole output (markers removed)."""

    reasoning_text: str
    normal_text: str


@dataclass(slots=True)
class ReasoningStep:
    """New reasoning text and new normal text released by one incremental step."""

    reasoning_text: str = ""
    normal_text: str = ""


@runtime_checkable
class ReasoningParser(Protocol):
    """What a reasoning parser plugin provides (see docs/plugins.md).

    The factory is called as ``factory(start_in_reasoning=None | bool)``; ``None`` means the
    family's default.
    """

    #: The marker that opens reasoning (``"<think>"``); the pipeline uses it to notice a prompt
    #: that already ends inside reasoning. Empty when the family has no textual start marker.
    start_marker: ClassVar[str]
    #: The markers that close reasoning (``("</think>",)``); the pipeline uses them to notice a
    #: prompt that already closed reasoning (thinking switched off by the template). Empty when
    #: the family has no textual end marker.
    end_markers: ClassVar[tuple[str, ...]]
    #: True when the markers are special tokens that must not be skipped in decoding.
    needs_special_tokens: ClassVar[bool]

    def parse_complete(self, text: str) -> ReasoningResult:
        """Split a whole output at once."""
        ...

    def parse_incremental(self, delta: str) -> ReasoningStep:
        """Consume the next piece of output; return what can be released now."""
        ...

    def finish(self) -> ReasoningStep:
        """End of output: release everything still held back."""
        ...
