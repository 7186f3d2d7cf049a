"""Tool-call parsing: the public parser API and the machinery shared by every parser."""

from turnout.tool_calls.types import (
    ToolCall,
    ToolCallDelta,
    ToolParser,
    ToolParseResult,
    ToolParseStep,
    Tools,
    fold_steps,
)

__all__ = [
    "ToolCall",
    "ToolCallDelta",
    "ToolParseResult",
    "ToolParseStep",
    "ToolParser",
    "Tools",
    "fold_steps",
]
