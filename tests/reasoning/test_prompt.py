"""Whether a rendered prompt leaves the model inside a reasoning block."""

from __future__ import annotations

import pytest

from turnout.reasoning.prompt import reasoning_open_at_prompt_end

END = ("</think>",)


@pytest.mark.parametrize(
    ("prompt", "requested", "expected"),
    [
        ("<｜Assistant｜><think>\n", None, True),  # DeepSeek-R1: the template opened it
        ("<|assistant|><think>", False, True),  # the prompt wins over the request
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", None, False),  # thinking off
        ("<|assistant|><think></think>", True, False),
        ("<|im_start|>assistant\n", None, None),  # the model decides: family default
        ("<|im_start|>assistant\n", True, True),
        ("<|im_start|>assistant\n", False, False),
    ],
)
def test_prompt_end_decides_the_start_state(
    prompt: str, requested: bool | None, expected: bool | None
) -> None:
    assert reasoning_open_at_prompt_end(prompt, "<think>", END, requested) is expected


def test_families_without_textual_markers_keep_the_request() -> None:
    assert reasoning_open_at_prompt_end("anything</think>", "", (), None) is None
