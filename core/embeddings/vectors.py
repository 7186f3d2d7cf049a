"""Embedding vectors as the answer gives them: shortened to ``dimensions`` (Matryoshka models,
SGLang's rules), as JSON floats or base64, in OpenAI's response shape."""

from __future__ import annotations

import base64
import math
import sys
from array import array
from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from turnout.errors import ApiError, bad_request
from turnout.generation.models import ModelRuntime

__all__ = [
    "EmbeddingObject",
    "EmbeddingResponse",
    "EmbeddingUsage",
    "check_dimensions",
    "encode_vector",
    "shorten",
]

#: A vector whose length is this close to 1 came normalised, and is normalised again when
#: shortened (float32 sums stay well within it).
_UNIT_TOLERANCE: Final = 1e-3


class EmbeddingObject(msgspec.Struct, kw_only=True):
    """One embedding of the answer."""

    object: Literal["embedding"] = "embedding"
    embedding: list[float] | str
    index: int


class EmbeddingUsage(msgspec.Struct):
    """Tokens of the request's inputs (embeddings generate none)."""

    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(msgspec.Struct, kw_only=True):
    """The answer of ``POST /v1/embeddings`` (OpenAI's ``CreateEmbeddingResponse``)."""

    object: Literal["list"] = "list"
    data: list[EmbeddingObject]
    model: str
    usage: EmbeddingUsage


def check_dimensions(dimensions: int | None, runtime: ModelRuntime) -> None:
    """A 400 unless the model's embeddings may be shortened to ``dimensions``, as SGLang
    decides: the model is a Matryoshka model (``is_matryoshka`` or ``matryoshka_dimensions``
    in its ``config.json``), the length is one it lists (if it lists any) and no more than
    its hidden size."""
    if dimensions is None:
        return
    facts = runtime.facts
    if not facts.matryoshka:
        raise bad_request(
            f"model {runtime.model_id!r} does not support matryoshka representation: changing "
            "the output dimensions would give poor results",
            "dimensions",
        )
    if facts.matryoshka_dimensions and dimensions not in facts.matryoshka_dimensions:
        raise bad_request(
            f"model {runtime.model_id!r} only supports dimensions "
            f"{list(facts.matryoshka_dimensions)}",
            "dimensions",
        )
    if facts.hidden_size is not None and dimensions > facts.hidden_size:
        raise _too_many_dimensions(dimensions, facts.hidden_size)


def _too_many_dimensions(dimensions: int, size: int) -> ApiError:
    return bad_request(
        f"dimensions {dimensions} is more than the model's embedding size {size}", "dimensions"
    )


def shorten(vector: Sequence[float], dimensions: int) -> list[float]:
    """The first ``dimensions`` components, normalised again when ``vector`` was normalised
    (what SGLang's pooler does: cut, then normalise)."""
    if dimensions > len(vector):
        raise _too_many_dimensions(dimensions, len(vector))
    head = list(vector[:dimensions])
    if abs(math.sqrt(math.fsum(v * v for v in vector)) - 1.0) > _UNIT_TOLERANCE:
        return head
    norm = math.sqrt(math.fsum(v * v for v in head))
    return [v / norm for v in head] if norm > 0 else head


def encode_vector(
    vector: Sequence[float], encoding: Literal["float", "base64"]
) -> list[float] | str:
    """A JSON array of floats, or the base64 of the little-endian float32 values (what the
    ``openai`` clients decode)."""
    if encoding == "float":
        return list(vector)
    packed = array("f", vector)
    if sys.byteorder == "big":  # pragma: no cover
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")
