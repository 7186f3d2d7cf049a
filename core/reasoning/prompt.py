"""Where a chat prompt leaves the model: inside a reasoning block the template opened, or not."""

from __future__ import annotations

from collections.abc import Sequence


def reasoning_open_at_prompt_end(
    prompt: str, start_marker: str, end_markers: Sequence[str], requested: bool | None
) -> bool | None:
    """The ``start_in_reasoning`` to create a parser with for an output that follows ``prompt``.

    A prompt that ends with the start marker (``…<think>\\n``) opened reasoning: True. One that
    ends with an end marker (``<think></think>``, thinking turned off by the template): False.
    Otherwise what the request asked for (``requested``), None leaving it to the family default.
    """
    tail = prompt.rstrip()
    if start_marker and tail.endswith(start_marker):
        return True
    if any(marker and tail.endswith(marker) for marker in end_markers):
        return False
    return requested
