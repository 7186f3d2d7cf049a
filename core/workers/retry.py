"""Retry back-off: exponential with jitter (SGLang router semantics)."""

from __future__ import annotations

import random

from turnout.workers.settings import RetrySettings


def backoff_delay(
    settings: RetrySettings, retry_index: int, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number ``retry_index`` (0 for the first retry).

    ``min(initial * multiplier**retry_index, max) * (1 + U(-jitter, +jitter))``.
    """
    if retry_index < 0:
        raise ValueError(f"retry_index must be >= 0, got {retry_index!r}")
    base = min(
        settings.initial_backoff_ms * settings.backoff_multiplier**retry_index,
        settings.max_backoff_ms,
    )
    jitter = settings.jitter_factor
    factor = 1.0 + (rng or random).uniform(-jitter, jitter) if jitter else 1.0
    return max(0.0, base * factor) / 1000.0
