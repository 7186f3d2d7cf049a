"""Graceful shutdown under uvicorn.

On SIGTERM/SIGINT :class:`DrainingServer` first marks every app of this process as draining
(``/readiness`` answers 503, new generation requests get 503, queued ones are refused), then
lets uvicorn stop accepting connections and wait ``shutdown_grace_s`` for in-flight requests.
Requests still running after that are cancelled, which aborts them on their workers: one that
has not answered yet gets a JSON 503, a stream ends with an SSE error event and ``[DONE]``
(see :func:`cancelled_by_shutdown`). The app's lifespan waits briefly for those aborts before
closing the worker channels.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from types import FrameType

import uvicorn

from turnout.errors import ApiError

log = logging.getLogger(__name__)
#: uvicorn's message when it cancels requests at the end of the grace period.
_UVICORN_GRACE_EXPIRED = "graceful shutdown exceeded"


class ShutDown(ApiError):
    """503: the router shut down before the request could finish."""

    def __init__(self) -> None:
        super().__init__(
            503,
            "turnout shut down before the request finished; retry it",
            code="shutting_down",
        )


def cancelled_by_shutdown(exc: BaseException, draining: bool) -> bool:
    """True when a request's cancellation is the end of the shutdown grace period: the app
    drains (``turnout serve``), or uvicorn said so (several processes under uvicorn)."""
    return draining or any(_UVICORN_GRACE_EXPIRED in str(arg) for arg in exc.args)


#: Callbacks that start draining, one per running app in this process (see ``drain_hook``).
_hooks: dict[int, tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = {}


@contextlib.contextmanager
def drain_hook(begin_drain: Callable[[], None]) -> Iterator[None]:
    """Register ``begin_drain`` (run on the current loop) while the block runs."""
    key = id(begin_drain)
    _hooks[key] = (asyncio.get_running_loop(), begin_drain)
    try:
        yield
    finally:
        _hooks.pop(key, None)


def begin_drain_all() -> None:
    """Start draining every registered app (safe to call from a signal handler)."""
    for loop, hook in list(_hooks.values()):
        with contextlib.suppress(RuntimeError):  # the loop is already closed
            loop.call_soon_threadsafe(hook)


class DrainingServer(uvicorn.Server):
    """A uvicorn server that reports not-ready and refuses new work as soon as it is told to
    exit, before uvicorn closes its listener."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            # The signal interrupts whatever ran: that request's id does not belong on this line.
            log.info(
                "shutting down: draining (grace %ss)",
                self.config.timeout_graceful_shutdown,
                extra={"request_id": "-"},
            )
            begin_drain_all()
        super().handle_exit(sig, frame)
