"""Prompt size checks: the model's limit, looked up once per prompt."""

from __future__ import annotations

import pytest

from turnout.errors import ApiError
from turnout.generation.models import ModelRuntime
from turnout.generation.prompt_size import (
    PromptLimit,
    encode_prompt,
    limit_from_labels,
    widest_limit,
)

from .outputs import TOKENIZER


class CountedLimit:
    """A model's prompt limit that counts how often it is asked for."""

    def __init__(self, max_prompt_tokens: int) -> None:
        self.limit = PromptLimit(max_prompt_tokens + 1, max_prompt_tokens)
        self.calls = 0

    def __call__(self) -> PromptLimit:
        self.calls += 1
        return self.limit


async def test_encode_prompt_looks_the_limit_up_once() -> None:
    """The limit is computed from every worker's labels: once per prompt, not once per check."""
    limit = CountedLimit(1000)
    runtime = ModelRuntime("m", TOKENIZER, prompt_limit=limit)
    ids = await encode_prompt(runtime, "hello there", add_special_tokens=False, param="prompt")
    assert ids == TOKENIZER.encode("hello there", add_special_tokens=False)
    assert limit.calls == 1


async def test_encode_prompt_still_refuses_a_prompt_over_the_limit() -> None:
    text = "many words here " * 20
    count = len(TOKENIZER.encode(text, add_special_tokens=False))
    runtime = ModelRuntime("m", TOKENIZER, prompt_limit=CountedLimit(count - 1))
    with pytest.raises(ApiError) as raised:
        await encode_prompt(runtime, text, add_special_tokens=False, param="prompt")
    assert raised.value.status == 400
    assert raised.value.code == "context_length_exceeded"


def test_limits_from_labels_and_the_widest_of_them() -> None:
    sglang = {"max_req_input_len": "4000", "context_length": "4096"}
    assert limit_from_labels(sglang) == PromptLimit(4096, 4000)
    assert limit_from_labels({"context_length": "2048"}) == PromptLimit(2048, 2047)
    assert limit_from_labels({"max_context_length": "100"}) == PromptLimit(100, 99)
    assert limit_from_labels({"context_length": "x"}) is None
    # Parsed once: the same labels give the same (immutable) limit.
    assert limit_from_labels(dict(sglang)) is limit_from_labels(sglang)
    small, large = PromptLimit(10, 9), PromptLimit(100, 99)
    assert widest_limit([small, large, small]) is large
    assert widest_limit([]) is None
    assert widest_limit([large, None]) is None  # one worker's limit unknown: no limit
