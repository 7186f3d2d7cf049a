"""Prompt size: the model's context limit, checked before and after tokenization, and long
rendering and tokenization kept off the event loop.

The limit comes from the workers (``GetModelInfo.max_req_input_len``, else the server's
``context_length``), so a prompt the workers would refuse is refused before it costs a
tokenization (when its length alone proves it, see :mod:`turnout.tokenizer.length_bound`) or
a worker round trip.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from turnout.errors import ApiError
from turnout.tenants import current_admission
from turnout.tokenizer import TooManyTokens
from turnout.tokenizer.model_tokenizer import OFF_LOOP_CHARS
from turnout.tokenizer.offload import offloader

if TYPE_CHECKING:
    from turnout.generation.models import ModelRuntime

RenderedT = TypeVar("RenderedT")

#: Requests with a body at least this large render their chat template on a tokenizer thread.
OFF_LOOP_BODY_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class PromptLimit:
    """How long a prompt a model's workers accept."""

    context_length: int
    max_prompt_tokens: int


def limit_from_labels(labels: Mapping[str, str]) -> PromptLimit | None:
    """A worker's limit from its discovered labels (``None`` when it did not say)."""
    return _limit(
        labels.get("max_req_input_len"),
        labels.get("context_length"),
        labels.get("max_context_length"),
    )


@functools.lru_cache(maxsize=256)
def _limit(
    max_req_input_len: str | None, context_length: str | None, max_context_length: str | None
) -> PromptLimit | None:
    # Asked per request for every worker of the model: the few distinct label values are
    # parsed once.
    max_input = _positive(max_req_input_len)
    context = _positive(context_length) or _positive(max_context_length)
    if max_input is not None:
        return PromptLimit(context or max_input + 1, max_input)
    if context is not None and context > 1:
        return PromptLimit(context, context - 1)  # SGLang wants the prompt shorter than that
    return None


def widest_limit(limits: Iterable[PromptLimit | None]) -> PromptLimit | None:
    """The limit of a model served by several workers: a prompt is refused only when no worker
    would take it, and not at all while any worker's limit is unknown."""
    widest = None
    for limit in limits:
        if limit is None:
            return None
        if widest is None or limit.max_prompt_tokens > widest.max_prompt_tokens:
            widest = limit
    return widest


def _positive(value: str | None) -> int | None:
    if value is None or not value.isdigit():
        return None
    number = int(value)
    return number if number > 0 else None


async def encode_prompt(
    runtime: ModelRuntime,
    text: str,
    *,
    add_special_tokens: bool,
    param: str,
    keep_last: int | None = None,
) -> list[int]:
    """Token ids of a prompt text: a 400 when it is empty or cannot fit the model's context
    (before encoding, when its length proves it); long texts are encoded off the event loop.
    ``keep_last``: see :func:`truncate_prompt`."""
    limit = runtime.prompt_limit()
    try:
        ids = await runtime.tokenizer.encode_off_loop(
            text,
            add_special_tokens,
            max_tokens=limit.max_prompt_tokens if limit is not None and keep_last is None else None,
        )
    except TooManyTokens as exc:
        assert limit is not None
        raise _too_long(limit, exc.tokens, param, at_least=exc.at_least) from None
    ids = truncate_prompt(runtime, ids, keep_last)
    _check_ids(ids, limit, param)
    return ids


def truncate_prompt(runtime: ModelRuntime, ids: list[int], keep_last: int | None) -> list[int]:
    """vLLM's ``truncate_prompt_tokens``: the last ``keep_last`` tokens of a prompt (-1: as many
    as the model's workers take; ``None``: all of them)."""
    if keep_last is None:
        return ids
    if keep_last < 0:
        limit = runtime.prompt_limit()
        if limit is None:
            return ids
        keep_last = limit.max_prompt_tokens
    return ids[-keep_last:] if len(ids) > keep_last else ids


async def encode_prompts(
    runtime: ModelRuntime,
    texts: Sequence[str],
    *,
    add_special_tokens: bool,
    params: Sequence[str],
    keep_last: int | None = None,
) -> list[list[int]]:
    """:func:`encode_prompt` for many texts: encoded as one batch, on a tokenizer thread when
    they are long together; a 400 naming ``params[i]`` for text ``i`` when it is empty or too
    long (before encoding anything, when its length proves it)."""
    limit = runtime.prompt_limit()
    tokenizer = runtime.tokenizer
    if limit is not None and keep_last is None:
        for text, param in zip(texts, params, strict=True):
            least = tokenizer.min_token_count(text)
            if least > limit.max_prompt_tokens:
                raise _too_long(limit, least, param, at_least=True)
    if sum(len(text) for text in texts) < OFF_LOOP_CHARS:
        batch = tokenizer.encode_batch(texts, add_special_tokens)
    else:
        batch = await offloader().run(tokenizer.encode_batch, texts, add_special_tokens)
    if keep_last is not None:
        batch = [truncate_prompt(runtime, ids, keep_last) for ids in batch]
    for ids, param in zip(batch, params, strict=True):
        _check_ids(ids, limit, param)
    return batch


def check_prompt_ids(runtime: ModelRuntime, ids: list[int], param: str) -> None:
    """A 400 when a prompt's token ids are empty or more than the model's context allows."""
    _check_ids(ids, runtime.prompt_limit(), param)


def check_prompt_fits(
    runtime: ModelRuntime, tokens: int, param: str, *, n: int, max_tokens: int | None
) -> None:
    """From a count, before the work that makes the prompt (decoding its images): a 400 when
    a prompt of ``tokens`` tokens is more than the model's context allows, a 429 when the
    request (prompt + ``max_tokens`` per choice) could never fit its tenant's token window."""
    limit = runtime.prompt_limit()
    if limit is not None and tokens > limit.max_prompt_tokens:
        raise _too_long(limit, tokens, param, at_least=False)
    admission = current_admission()
    if admission is not None:
        context = limit.context_length if limit is not None else None
        admission.refuse_oversized(tokens, n=n, max_tokens=max_tokens, context_length=context)


def _check_ids(ids: list[int], limit: PromptLimit | None, param: str) -> None:
    if not ids:
        raise ApiError(
            400, "the prompt is empty (it has no tokens)", param=param, code="empty_prompt"
        )
    if limit is not None and len(ids) > limit.max_prompt_tokens:
        raise _too_long(limit, len(ids), param, at_least=False)


def _too_long(limit: PromptLimit, tokens: int, param: str, *, at_least: bool) -> ApiError:
    count = f"at least {tokens}" if at_least else str(tokens)
    return ApiError(
        400,
        f"This model's maximum context length is {limit.context_length} tokens, which allows "
        f"prompts of at most {limit.max_prompt_tokens} tokens; the prompt has {count} tokens.",
        param=param,
        code="context_length_exceeded",
    )


async def render_off_loop(
    body_size: int, render: Callable[..., RenderedT], *args: Any, **kwargs: Any
) -> RenderedT:
    """``render(*args, **kwargs)``, on a tokenizer thread when the request body is large (a
    template over megabytes of messages takes tens of milliseconds)."""
    if body_size < OFF_LOOP_BODY_BYTES:
        return render(*args, **kwargs)
    return await offloader().run(functools.partial(render, *args, **kwargs))
