"""How fast admitted requests drain (ends per second) and how long the first token takes, both
measured: the waits behind ``Retry-After`` and the deadline checks."""

from __future__ import annotations

from collections import deque

#: Ends remembered for the drain rate.
_KEEP = 64
#: Ends needed before the rate is trusted.
_MIN_ENDS = 4
#: Weight of a new time-to-first-token sample in the moving average.
_TTFT_WEIGHT = 0.2


class DrainMeter:
    """The drain rate over the last ends and a moving average of the time to first token."""

    __slots__ = ("_ends", "_ttft_samples", "ttft_s")

    def __init__(self) -> None:
        self._ends: deque[float] = deque(maxlen=_KEEP)
        #: Average seconds from admission to the first token (0: not measured yet).
        self.ttft_s = 0.0
        self._ttft_samples = 0

    def ended(self, now: float) -> None:
        """An admitted request ended at ``now``."""
        self._ends.append(now)

    def first_token(self, seconds: float) -> None:
        """An admitted request took ``seconds`` to its first token."""
        self._ttft_samples += 1
        if self._ttft_samples == 1:
            self.ttft_s = seconds
        else:
            self.ttft_s += _TTFT_WEIGHT * (seconds - self.ttft_s)

    def rate(self, now: float) -> float | None:
        """Ends per second lately (None: too few to say); falls while nothing ends."""
        ends = self._ends
        if len(ends) < _MIN_ENDS:
            return None
        span = now - ends[0]
        return len(ends) / span if span > 0 else None

    def wait_s(self, ahead: int, now: float) -> float | None:
        """Seconds until ``ahead`` more requests have ended (None: unknown)."""
        rate = self.rate(now)
        return ahead / rate if rate else None
