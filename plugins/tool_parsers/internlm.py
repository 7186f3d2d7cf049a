"""InternLM 2 / Intern-S1 tool calls.

``<|action_start|><|plugin|>{"name": N, "parameters": {...}}<|action_end|>``.

Whitespace between ``<|action_start|>`` and ``<|plugin|>`` is accepted (Intern-S1 writes a
space). Choices (identical in streaming and one-shot): ``arguments`` is accepted for
``parameters``; the tags are dropped for a call (a missing ``<|action_end|>`` at the end is
tolerated); several blocks give several calls; text around them is kept exactly. An action block
for another plugin (``<|interpreter|>``) stays normal text. Broken calls and unknown functions
follow the project rules (a rejected call keeps its tags in the text).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import ClassVar

from turnout.tool_calls.base import FAILED, CallShape
from turnout.tool_calls.json_calls import BlockCallsParser

ACTION_START = "<|action_start|>"
PLUGIN = "<|plugin|>"
ACTION_END = "<|action_end|>"


class InternLmToolParser(BlockCallsParser):
    """InternLM ``<|action_start|><|plugin|>`` JSON blocks."""

    START_MARKERS: ClassVar[tuple[str, ...]] = (ACTION_START,)
    END_MARKERS: ClassVar[tuple[str, ...]] = (ACTION_END,)
    SHAPE: ClassVar[CallShape] = CallShape(args_keys=("parameters", "arguments"))
    ALLOW_OBJECT: ClassVar[bool] = False
    ALLOW_ARRAY: ClassVar[bool] = False

    def other_block(self) -> Generator[None, None, None]:
        # Reached for every action block: only the plugin channel carries calls.
        if not (yield from self.expect(PLUGIN)):
            self.release()
            return
        yield from self.skip_ws()
        if (yield from self.peek()) != "{":
            self.release()
            return
        outcome = yield from self.call_object(self.SHAPE)
        if outcome == FAILED:
            self.release()
            return
        yield from self.after_object(outcome)
