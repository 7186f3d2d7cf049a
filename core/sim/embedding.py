"""The simulator's embeddings: deterministic unit vectors of the model's hidden size.

The vector of a prompt is the mean of its tokens' vectors, L2-normalised (mean pooling, as
many embedding models do). Token ``t``'s vector has ``dim`` components, the bytes of
``shake_128(b"turnout-sim-embedding:<t>").digest(dim)`` centred on zero (``byte - 127.5``).
So the same ids always give the same vector, prompts sharing most tokens point in similar
directions, and any process (or test) can recompute a vector with :func:`embed_ids`.

``dim`` is the model's ``hidden_size`` (``config.json``, or its ``text_config`` for
multimodal models), :data:`DEFAULT_EMBEDDING_DIM` when the config has none (the demo model).
"""

from __future__ import annotations

import hashlib
import math
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["DEFAULT_EMBEDDING_DIM", "embed_ids", "embedding_dim"]

DEFAULT_EMBEDDING_DIM: Final = 64
_LANE: Final = 8  # bytes per accumulator lane: 255 * any token count fits in 64 bits


def embedding_dim(config: Mapping[str, Any]) -> int:
    """The hidden size a model's ``config.json`` declares (or the default)."""
    for section in (config, config.get("text_config"), config.get("llm_config")):
        if isinstance(section, Mapping):
            size = section.get("hidden_size")
            if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                return size
    return DEFAULT_EMBEDDING_DIM


def _token_lanes(token_id: int, dim: int) -> int:
    """Token ``token_id``'s bytes spread one per 64-bit lane of a big integer."""
    digest = hashlib.shake_128(b"turnout-sim-embedding:%d" % token_id).digest(dim)
    spread = bytearray(dim * _LANE)
    spread[::_LANE] = digest
    return int.from_bytes(spread, "little")


def embed_ids(input_ids: Iterable[int], dim: int) -> list[float]:
    """The unit vector of ``input_ids`` (at least one id) in ``dim`` dimensions."""
    counts = Counter(input_ids)
    total = sum(counts.values())
    if total == 0 or dim <= 0:
        raise ValueError("an embedding needs at least one token and a positive dimension")
    # Sum the byte vectors with big-integer additions (the lanes never carry into each other)
    # instead of dim x tokens Python additions.
    summed = sum(_token_lanes(token, dim) * count for token, count in counts.items())
    lanes = array("Q")
    lanes.frombytes(summed.to_bytes(dim * _LANE, "little"))
    if sys.byteorder == "big":  # pragma: no cover
        lanes.byteswap()
    centred = [value / total - 127.5 for value in lanes]
    norm = math.sqrt(sum(v * v for v in centred))
    if norm == 0.0:  # pragma: no cover - needs every byte of every token to be 127.5
        return [1.0 / math.sqrt(dim)] * dim
    return [v / norm for v in centred]
