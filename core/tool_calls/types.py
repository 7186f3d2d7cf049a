"""The public tool-call parser API: what a tool parser plugin implements and returns.

A parser instance serves exactly one output (one choice of one request). The pipeline feeds it
text deltas with :meth:`ToolParser.parse_incremental` and ends with :meth:`ToolParser.finish`;
:meth:`ToolParser.parse_complete` parses a whole text at once. Folding the incremental steps of
any chunking of a text must give the same normal text and calls as ``parse_complete``. A call
must only be returned once it is known to be valid (its arguments are complete JSON): deltas
cannot be taken back, and an agent must never run a tool with broken arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

#: An OpenAI tool definition as sent in a request: ``{"type": "function", "function": {...}}``.
ToolDefinition = Mapping[str, Any]
Tools = Sequence[ToolDefinition] | None


@dataclass(slots=True, frozen=True)
class ToolCall:
    """One complete tool call: the function name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclass(slots=True)
class ToolParseResult:
    """Result of parsing a whole output: the text around the calls and the calls themselves."""

    normal_text: str
    calls: list[ToolCall] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class ToolCallDelta:
    """A piece of one call while streaming.

    ``index`` is the call's 0-based position in this output and never changes; ``name`` is set
    once, on the first delta of a call; ``arguments`` is text to append to the call's arguments.
    """

    index: int
    name: str | None = None
    arguments: str = ""


@dataclass(slots=True)
class ToolParseStep:
    """What one incremental step released: new normal text and call deltas, in output order."""

    normal_text: str = ""
    calls: list[ToolCallDelta] = field(default_factory=list)


CallIdStyle = Literal["openai", "kimi", "mistral"]


@dataclass(slots=True, frozen=True)
class CallFormat:
    """How a format writes one call, for constrained decoding (a structural tag): the text
    ``begin`` (with ``{name}`` standing for the function's name), the arguments as a JSON
    object, then ``end``; ``trigger`` is the text that opens every call.

    A parser class offers it through an optional classmethod ``call_format()``
    (:class:`~turnout.tool_calls.BlockCallsParser` derives it from its markers); turnout then
    keeps ``strict`` tools and ``response_format`` beside ``tool_choice: auto`` to their
    schemas while the model may still choose between text and calls.
    """

    trigger: str
    begin: str
    end: str

    def begin_for(self, name: str) -> str:
        """``begin`` for a call of function ``name``."""
        return self.begin.replace("{name}", name)


@runtime_checkable
class ToolParser(Protocol):
    """What a tool-call parser plugin provides (see docs/plugins.md)."""

    #: ``"openai"`` gives ids ``call_<24 hex>``; ``"kimi"`` gives ``functions.NAME:IDX``;
    #: ``"mistral"`` gives 9 letters and digits (Mistral's templates refuse other ids).
    call_id_style: ClassVar[CallIdStyle]
    #: True when the format's markers are special tokens that must not be skipped in decoding.
    needs_special_tokens: ClassVar[bool]

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        """Parse a whole output at once."""
        ...

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        """Consume the next piece of output; return what can be released now."""
        ...

    def finish(self, truncated: bool = False) -> ToolParseStep:
        """End of output: release everything still held back (never swallow text).

        ``truncated`` is True when the output was cut off by the token limit (the answer ends
        with ``finish_reason: length``): a call still open is then returned with its arguments
        as received; otherwise an unfinished call is normal text. turnout always passes it,
        by keyword: every parser declares it.
        """
        ...


def fold_steps(steps: Sequence[ToolParseStep]) -> ToolParseResult:
    """Fold incremental steps into the shape ``parse_complete`` returns."""
    text_parts: list[str] = []
    names: dict[int, str] = {}
    args: dict[int, list[str]] = {}
    for step in steps:
        text_parts.append(step.normal_text)
        for delta in step.calls:
            if delta.name is not None:
                names[delta.index] = delta.name
            args.setdefault(delta.index, []).append(delta.arguments)
    calls = [ToolCall(names.get(i, ""), "".join(args.get(i, []))) for i in sorted(args)]
    return ToolParseResult("".join(text_parts), calls)
