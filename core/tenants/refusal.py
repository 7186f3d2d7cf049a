"""The 429 answers of a tenant over a limit, with ``Retry-After`` and OpenAI's rate-limit headers.

``x-ratelimit-limit-{requests,tokens}`` is the budget of one window, ``-remaining-`` what is
left of it now, ``-reset-`` the time until it is whole again (``6m0s``, ``1.5s``, ``20ms``).
``Retry-After`` (whole seconds) and ``retry-after-ms`` say when the refused request would fit;
the official ``openai`` client waits that long before its retry.

The state of a window comes from the sliding-window counter of ``limits``: the previous
window's count weighs as much as is left of it, ``floor(previous * previous_ttl / window) +
current``, so the wait can be solved for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from turnout.errors import ApiError

#: Added to a computed wait so that the retry lands after the window moved, not on its edge.
_MARGIN_S = 0.01


@dataclass(frozen=True, slots=True)
class WindowState:
    """A sliding window of ``limit`` per ``window_s`` as the storage reported it."""

    limit: int
    window_s: int
    previous: int
    previous_ttl: float
    current: int
    current_ttl: float

    @property
    def _weighted(self) -> int:
        ttl = min(max(self.previous_ttl, 0.0), self.window_s)
        return math.floor(self.previous * ttl / self.window_s) + self.current

    @property
    def remaining(self) -> int:
        """What a request may still take now."""
        return max(0, self.limit - self._weighted)

    @property
    def _shift_in(self) -> float:
        """Seconds until the current window becomes the previous one."""
        return max(0.0, self.current_ttl - self.window_s)

    @property
    def reset_s(self) -> float:
        """Seconds until the whole budget is free again (when nothing more is taken)."""
        if self.current > 0:
            return self._shift_in + self.window_s
        if self.previous > 0:
            return max(0.0, self.previous_ttl)
        return 0.0

    def wait_s(self, cost: int) -> float | None:
        """Seconds until ``cost`` fits (None: it never does, it exceeds the limit)."""
        if cost > self.limit:
            return None
        window = self.window_s
        free = self.limit - cost - self.current
        if free >= 0:
            if self.previous <= 0:
                return 0.0
            return max(0.0, self.previous_ttl - window * (free + 1) / self.previous)
        # The current window's count must age: after the shift it weighs (1 - u / window).
        aged = window * (1 - (self.limit - cost + 1) / self.current)
        return self._shift_in + max(0.0, aged)


def duration(seconds: float) -> str:
    """A reset time as OpenAI writes it: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(0, math.ceil(seconds * 1000))}ms"
    minutes, rest = divmod(seconds, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{text}s" if minutes else f"{text}s"


def rate_limit_headers(states: dict[str, WindowState]) -> dict[str, str]:
    """``x-ratelimit-*`` headers of each known window (``requests``, ``tokens``)."""
    headers = {}
    for kind, state in states.items():
        headers[f"x-ratelimit-limit-{kind}"] = str(state.limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(state.remaining)
        headers[f"x-ratelimit-reset-{kind}"] = duration(state.reset_s)
    return headers


def _retry_headers(wait_s: float) -> dict[str, str]:
    """``Retry-After`` in whole seconds (rounded up) and ``retry-after-ms``."""
    return {
        "retry-after": str(max(1, math.ceil(wait_s))),
        "retry-after-ms": str(max(1, math.ceil(wait_s * 1000))),
    }


def over_limit(
    tenant: str, kind: str, cost: int, states: dict[str, WindowState], fallback_wait_s: float
) -> ApiError:
    """429 for a request whose ``cost`` does not fit the ``kind`` window now."""
    state = states.get(kind)
    wait = state.wait_s(cost) if state is not None else None
    wait_s = wait + _MARGIN_S if wait is not None and wait > 0 else fallback_wait_s
    unit = "request" if kind == "requests" else "tokens"
    limit = f" ({state.limit} {kind} per {state.window_s}s)" if state is not None else ""
    needs = "" if kind == "requests" else f"; this request needs {cost} {unit}"
    return ApiError(
        429,
        f"rate limit reached for tenant {tenant!r} on {kind}{limit}{needs}; retry in {wait_s:.1f}s",
        code="rate_limit_exceeded",
        headers={**_retry_headers(wait_s), **rate_limit_headers(states)},
    )


def too_large(tenant: str, cost: int, limit: int, window_s: int) -> ApiError:
    """429 for a request that needs more tokens than the tenant's whole window: retrying
    cannot help (``x-should-retry: false`` tells the ``openai`` client so)."""
    return ApiError(
        429,
        f"request too large for tenant {tenant!r}: it needs {cost} tokens (prompt + max_tokens "
        f"for each choice) and the limit is {limit} tokens per {window_s}s; lower max_tokens",
        code="request_too_large_for_limit",
        headers={"x-should-retry": "false"},
    )


def too_many_running(tenant: str, limit: int) -> ApiError:
    """429 for a tenant already running its ``concurrent_requests``."""
    return ApiError(
        429,
        f"tenant {tenant!r} already has {limit} requests running (its concurrent_requests); "
        "retry when one has finished",
        code="concurrency_limit_exceeded",
        headers=_retry_headers(1.0),
    )
