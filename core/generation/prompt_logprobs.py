"""Log probabilities of a prompt's tokens: read from the worker's ``InputLogProbs``, and shown
as vLLM's ``prompt_logprobs`` (completions' ``echo`` shows them as OpenAI's logprobs)."""

from __future__ import annotations

import itertools
from typing import Any

from turnout.generation.choice import TokenPiece
from turnout.generation.events import TokenLogprob
from turnout.generation.requests import OpenAIRequest
from turnout.generation.unsupported import unsupported
from turnout.wire.proto import sglang_scheduler_pb2 as pb


def read_prompt_logprobs(
    given: pb.InputLogProbs, piece: TokenPiece, top: int
) -> list[TokenLogprob]:
    """Each prompt token with its logprob (``None`` for the first: nothing precedes it) and at
    most ``top`` alternatives (none for the first)."""
    tops = given.top_logprobs
    tokens: list[TokenLogprob] = []
    for i, (token_id, entry) in enumerate(zip(given.token_ids, given.token_logprobs, strict=False)):
        value = entry.value if entry.HasField("value") else None
        alternatives: list[TokenLogprob] = []
        if value is not None and i < len(tops) and top:
            pairs = zip(tops[i].token_ids, tops[i].values, strict=False)
            for alt_id, alt_value in itertools.islice(pairs, top):
                alt_text, alt_raw = piece(alt_id)
                alternatives.append(TokenLogprob(alt_id, alt_text, alt_value, raw=alt_raw))
        text, raw = piece(token_id)
        tokens.append(TokenLogprob(token_id, text, value, alternatives, raw))
    return tokens


def vllm_prompt_logprobs(tokens: list[TokenLogprob]) -> list[dict[str, Any] | None]:
    """vLLM's ``prompt_logprobs``: per prompt token, ``null`` for the first, else token id →
    ``{logprob, rank, decoded_token}`` for the token and its alternatives. ``rank`` is the
    place among the alternatives (``null`` for a token outside them: the worker does not say)."""
    shown: list[dict[str, Any] | None] = []
    for token in tokens:
        if token.logprob is None:
            shown.append(None)
            continue
        ranked = {alt.token_id: rank for rank, alt in enumerate(token.top, 1)}
        entry = {
            str(token.token_id): {
                "logprob": token.logprob,
                "rank": ranked.get(token.token_id),
                "decoded_token": token.token,
            }
        }
        for rank, alt in enumerate(token.top, 1):
            entry.setdefault(
                str(alt.token_id),
                {"logprob": alt.logprob, "rank": rank, "decoded_token": alt.token},
            )
        shown.append(entry)
    return shown


def prompt_logprobs_top(request: OpenAIRequest, echo_top: int | None = None) -> int | None:
    """How many alternatives per prompt token to ask for (``None``: no prompt logprobs):
    vLLM's ``prompt_logprobs``, and ``echo_top`` (completions' echo with logprobs)."""
    asked = [top for top in (request.prompt_logprobs, echo_top) if top is not None]
    return max(asked) if asked else None


def refuse_streamed_prompt_logprobs(request: OpenAIRequest) -> None:
    """vLLM's ``prompt_logprobs`` come in one-shot answers only (as in vLLM)."""
    if request.prompt_logprobs is not None and request.stream:
        raise unsupported(
            "prompt_logprobs", "prompt_logprobs is not available when streaming (stream: true)"
        )
