"""A response's writes to its connection, past uvicorn's ``send`` where that is safe.

* :class:`JoinedWrites`, the transport uvicorn's protocol writes to, sends a response's head
  and its body in one write (one syscall, one TCP segment) when the body follows in the same
  turn of the loop, as a non-streaming answer's does;
* :class:`DirectBody`, offered to each request (:func:`direct_body_of`), writes a stream's
  middle pieces framed as uvicorn frames them, without an ASGI message and the ``send`` of
  every middleware on the way.

The connection guard (:mod:`turnout.server.connections`) puts both in place.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from litestar.types import Scope

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

__all__ = ["DIRECT_BODY_KEY", "DirectBody", "JoinedWrites", "direct_body_of"]

#: Key of the request's :class:`DirectBody` in its ``scope["state"]``.
DIRECT_BODY_KEY = "turnout.direct_body"


def direct_body_of(scope: Scope) -> DirectBody | None:
    """The request's :class:`DirectBody` (None when the server runs without the guard, or the
    app does not let body pieces skip its middlewares)."""
    state = scope.get("state")
    direct = state.get(DIRECT_BODY_KEY) if isinstance(state, dict) else None
    return direct if isinstance(direct, DirectBody) else None


class JoinedWrites:
    """The transport uvicorn's protocol writes to: a response head (status line and headers,
    which uvicorn writes alone) is held until the next write, which then carries both, or
    until the loop's next turn when nothing follows at once (a stream's head, say). Held bytes
    always go out before anything written after them, and before the connection closes."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` (a response head alone is held, see the class doc)."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif isinstance(data, bytes) and data.startswith(b"HTTP/") and data.endswith(b"\r\n\r\n"):
            self._held = data
            self._loop.call_soon(self.flush)
        else:
            self._transport.write(data)

    def write_body(self, data: bytes) -> None:
        """Write ``data``, which is no response head (after what is held, if anything)."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        else:
            self._transport.write(data)

    def flush(self) -> None:
        """Write what is held, if anything."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():  # aborted meanwhile: nobody to send it to
                self._transport.write(held)

    def close(self) -> None:
        """Close after writing what is held."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drop the connection now, and what is held with it."""
        self._held = None
        self._transport.abort()

    def is_closing(self) -> bool:
        """True once the connection closes."""
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's ``get_extra_info``."""
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        """Stop reading from the socket."""
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Read from the socket again."""
        self._transport.resume_reading()

    def __getattr__(self, name: str) -> Any:
        # The rest of the transport's interface (set_protocol on an upgrade, buffer sizes…).
        return getattr(self._transport, name)


def _unbound() -> None:
    return None


class DirectBody:
    """Writes the middle pieces of one chunked response straight to its connection: the bytes
    uvicorn's ``send`` would write for ``{"body": piece, "more_body": True}``, without that
    message and the ``send`` of every middleware on its way (none of which looks at a body
    piece unless the app says so, see the ops middleware).

    Only for what needs no state change and no wait: the head and the end of the body, and
    any piece while the client is not reading (writes paused), go through ``send``, which
    keeps uvicorn's bookkeeping (keep-alive, the next request) and its flow control.
    """

    __slots__ = ("_cycle", "_writes")

    def __init__(self, writes: JoinedWrites) -> None:
        self._writes = writes
        self._cycle: Callable[[], RequestResponseCycle | None] = _unbound

    def bind(self, cycle: RequestResponseCycle) -> None:
        """The uvicorn request whose response this writes (before, :meth:`write` declines)."""
        # Weakly: the request's scope holds this, and a reference back to it would leave each
        # request's scope and cycle to the garbage collector instead of freeing them at once.
        self._cycle = weakref.ref(cycle)

    def write(self, piece: bytes) -> bool:
        """Write ``piece`` as the next chunk of the response, now; False when it must go
        through ``send`` instead (head not sent yet or body complete, not chunked, or the
        client not reading). Like ``send``, writes nothing once the client is gone."""
        cycle = self._cycle()
        if cycle is None:
            return False
        if cycle.disconnected:
            return True
        if (
            cycle.flow.write_paused
            or not cycle.response_started
            or cycle.response_complete
            or cycle.chunked_encoding is not True
        ):
            return False
        if piece:
            self._writes.write_body(b"%x\r\n%b\r\n" % (len(piece), piece))
        return True
