"""A line-oriented tool parser: ``CALL name {json}`` lines are calls, other lines are text."""

from __future__ import annotations

import json
from typing import ClassVar, Literal

from turnout.tool_calls import ToolCall, ToolCallDelta, ToolParseResult, ToolParseStep, Tools

PREFIX = "CALL "


def _parse_line(line: str) -> ToolCall | None:
    if not line.startswith(PREFIX):
        return None
    name, _, arguments = line[len(PREFIX) :].partition(" ")
    try:
        json.loads(arguments)
    except ValueError:
        return None
    return ToolCall(name, arguments.strip()) if name else None


class CallLinesParser:
    """Works line by line, so streaming holds back at most one unfinished line."""

    call_id_style: ClassVar[Literal["openai", "kimi"]] = "openai"
    needs_special_tokens: ClassVar[bool] = False

    def __init__(self) -> None:
        self._pending = ""
        self._count = 0

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        result = ToolParseResult("")
        for line in text.splitlines(keepends=True):
            call = _parse_line(line.rstrip("\n"))
            if call is None:
                result.normal_text += line
            else:
                result.calls.append(call)
        return result

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        self._pending += delta
        *lines, self._pending = self._pending.split("\n")
        return self._emit([line + "\n" for line in lines])

    def finish(self, truncated: bool = False) -> ToolParseStep:
        rest, self._pending = self._pending, ""
        return self._emit([rest] if rest else [])

    def _emit(self, lines: list[str]) -> ToolParseStep:
        step = ToolParseStep()
        for line in lines:
            call = _parse_line(line.rstrip("\n"))
            if call is None:
                step.normal_text += line
            else:
                step.calls.append(ToolCallDelta(self._count, call.name, call.arguments))
                self._count += 1
        return step
