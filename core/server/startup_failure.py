"""A start-up that fails inside the app's lifespan, reported as one line.

Litestar answers uvicorn's lifespan start-up with the formatted traceback, which uvicorn logs as
one 40-frame record before it exits 3. :class:`OneLineStartup` wraps the app: it keeps the
failure as one line (the :class:`~turnout.errors.StartupError`'s message, else the exception
and where it was raised) for ``turnout serve`` to print and exit 2 with.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from turnout.errors import StartupError

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: Any ASGI app (Litestar's own types name each scope and event).
ASGIApp = Callable[..., Awaitable[None]]

__all__ = ["OneLineStartup", "describe_failure"]


class OneLineStartup:
    """The app, with a failed lifespan start-up kept as :attr:`failure` (and not logged)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        #: Why start-up failed, in one line; None while it has not.
        self.failure: str | None = None

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_one_line(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed":
                # Sent from inside the app's `except` block: the exception is the current one.
                self.failure = describe_failure(sys.exc_info()[1])
                message = {"type": "lifespan.startup.failed", "message": ""}
            await send(message)

        await self.app(scope, receive, send_one_line)


def describe_failure(exc: BaseException | None) -> str:
    """One line for a start-up failure: a StartupError's message, else the exception's type,
    message and the place it was raised (a defect: the place is what to report)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if exc is None:
        return "start-up failed"
    if isinstance(exc, StartupError):
        return " ".join(str(exc).split())
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"start-up failed: {type(exc).__name__}: {' '.join(str(exc).split())}{where}"
