"""The answers of admission: a bad class or deadline header (400), a full class queue (429), no
capacity in time or a deadline that cannot be met (503), each shed one with ``Retry-After``."""

from __future__ import annotations

import math

from turnout.errors import ApiError

#: Longest ``Retry-After`` given (seconds).
MAX_RETRY_AFTER_S = 60.0


def retry_after(seconds: float) -> dict[str, str]:
    """``Retry-After`` (whole seconds, at least 1) and ``retry-after-ms`` for a wait."""
    wait = min(max(seconds, 0.0), MAX_RETRY_AFTER_S)
    return {"Retry-After": str(max(1, math.ceil(wait))), "retry-after-ms": str(int(wait * 1000))}


class InvalidPriority(ApiError):
    """400: ``x-turnout-priority`` names no class."""

    def __init__(self, given: str, known: list[str]) -> None:
        super().__init__(
            400,
            f"x-turnout-priority: unknown class {given!r} (classes: {', '.join(known)})",
            code="invalid_priority",
        )


class InvalidDeadline(ApiError):
    """400: ``x-turnout-ttft-deadline-ms`` is not a positive whole number of milliseconds."""

    def __init__(self, given: str) -> None:
        super().__init__(
            400,
            "x-turnout-ttft-deadline-ms: expected a whole number of milliseconds from 1 to "
            f"3600000, got {given!r}",
            code="invalid_deadline",
        )


class ClassQueueFull(ApiError):
    """429: the class's queue is full."""

    def __init__(self, name: str, size: int, wait_s: float) -> None:
        super().__init__(
            429,
            f"too many requests: the {name!r} queue holds {size} waiting; retry later",
            code="admission_queue_full",
            headers=retry_after(wait_s),
        )


class ClassQueueTimeout(ApiError):
    """503: no capacity within the class's queue timeout."""

    def __init__(self, name: str, waited_s: float, wait_s: float) -> None:
        super().__init__(
            503,
            f"the router is overloaded: no capacity for the {name!r} class within "
            f"{waited_s:g}s; retry later",
            code="admission_queue_timeout",
            headers=retry_after(wait_s),
        )


class DeadlineUnmeetable(ApiError):
    """503: the request's time-to-first-token deadline cannot be met any more."""

    def __init__(self, deadline_ms: int, wait_s: float) -> None:
        super().__init__(
            503,
            f"the first token cannot come within the {deadline_ms} ms deadline "
            "(x-turnout-ttft-deadline-ms) at the current load; retry later",
            code="deadline_unmeetable",
            headers=retry_after(wait_s),
        )
