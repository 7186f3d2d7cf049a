"""The inputs of an embeddings request as prompts: texts tokenized (one batch, off the event loop
when long), token ids checked, each within the model's context."""

from __future__ import annotations

from turnout.embeddings.request import MAX_INPUTS
from turnout.errors import bad_request
from turnout.generation.completions import given_prompts
from turnout.generation.models import ModelRuntime
from turnout.generation.plan import Prompt
from turnout.generation.prompt_size import check_prompt_ids, encode_prompts, truncate_prompt
from turnout.generation.requests import PromptItem

__all__ = ["embedding_prompts"]


async def embedding_prompts(
    given: str | list[PromptItem], runtime: ModelRuntime, keep_last: int | None = None
) -> list[Prompt]:
    """One prompt per input, in order: texts with the tokenizer's special tokens (as SGLang
    tokenizes embedding inputs), token ids as given; each input's last ``keep_last`` tokens
    only, when given (vLLM's ``truncate_prompt_tokens``). 400s name the input (``input[i]``)."""
    items = given_prompts(given, "input")
    if len(items) > MAX_INPUTS:
        raise bad_request(f"input has {len(items)} items, more than {MAX_INPUTS}", "input")
    one = isinstance(given, str) or not any(isinstance(item, str | list) for item in given)
    params = ["input" if one else f"input[{i}]" for i in range(len(items))]
    texts = [(i, item) for i, item in enumerate(items) if isinstance(item, str)]
    for i, text in texts:
        if not text:
            raise bad_request(f"{params[i]} must not be an empty string", params[i])
    encoded = await encode_prompts(
        runtime,
        [text for _, text in texts],
        add_special_tokens=True,
        params=[params[i] for i, _ in texts],
        keep_last=keep_last,
    )
    prompts: list[Prompt] = []
    text_ids = iter(encoded)
    for i, item in enumerate(items):
        if isinstance(item, str):
            prompts.append(Prompt(next(text_ids), item))
        else:
            ids = truncate_prompt(runtime, item, keep_last)
            check_prompt_ids(runtime, ids, params[i])
            prompts.append(Prompt(ids))
    return prompts
