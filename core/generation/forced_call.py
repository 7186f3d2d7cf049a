"""The "parser" for a named ``tool_choice``: the constrained output is the arguments object."""

from __future__ import annotations

from typing import ClassVar

from turnout.tool_calls.types import (
    CallIdStyle,
    ToolCall,
    ToolCallDelta,
    ToolParseResult,
    ToolParseStep,
    Tools,
)


class ForcedCallParser:
    """Every byte of output is the arguments of one call to a known function."""

    call_id_style: ClassVar[CallIdStyle] = "openai"
    needs_special_tokens: ClassVar[bool] = False

    def __init__(self, name: str) -> None:
        self._name = name
        self._started = False

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        """The whole text is the arguments."""
        return ToolParseResult("", [ToolCall(self._name, text.lstrip() or "{}")])

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        """Announce the call on the first delta, then pass argument text through."""
        if not self._started:
            delta = delta.lstrip()
            if not delta:
                return ToolParseStep()
            self._started = True
            return ToolParseStep("", [ToolCallDelta(0, self._name, delta)])
        return ToolParseStep("", [ToolCallDelta(0, None, delta)]) if delta else ToolParseStep()

    def finish(self, truncated: bool = False) -> ToolParseStep:
        """An empty output still yields the call, with empty arguments."""
        if not self._started:
            self._started = True
            return ToolParseStep("", [ToolCallDelta(0, self._name, "{}")])
        return ToolParseStep()
