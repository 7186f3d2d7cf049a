"""The ``POST /v1/embeddings`` request body, validated by msgspec (a 400 naming the field)."""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec
from msgspec import Meta

from turnout.generation.requests import (
    INT32_MAX,
    PromptItem,
    TruncatePromptTokens,
    check_truncate_prompt_tokens,
)

__all__ = ["MAX_INPUTS", "EmbeddingRequest"]

#: Most inputs one request may embed (OpenAI's bound on ``input`` arrays).
MAX_INPUTS: Final = 2048


class EmbeddingRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /v1/embeddings`` (an unknown field is refused)."""

    #: A string, a list of strings, a list of token ids, or a list of token-id lists.
    input: str | Annotated[list[PromptItem], Meta(min_length=1)]
    model: str | None = None
    #: ``float`` (a JSON array) or ``base64`` (little-endian float32 bytes).
    encoding_format: Literal["float", "base64"] = "float"
    #: Shorten each embedding to this many dimensions (Matryoshka models only).
    dimensions: Annotated[int, Meta(ge=1, le=INT32_MAX)] | None = None
    #: Accepted and ignored, as OpenAI-compatible servers do.
    user: str | None = None
    #: vLLM: embed only each input's last k tokens (-1: as many as the model takes).
    truncate_prompt_tokens: TruncatePromptTokens | None = None

    def __post_init__(self) -> None:
        check_truncate_prompt_tokens(self.truncate_prompt_tokens)
