"""The router's listening sockets, bound before anything starts so that a taken port fails
start-up with one line."""

from __future__ import annotations

import errno
import socket

from turnout.errors import StartupError


def bind_listener(
    host: str, port: int, backlog: int = 2048, *, setting: str = "--port / server.port"
) -> socket.socket:
    """A TCP socket listening on ``host:port`` (uvicorn serves it once the app has started;
    connections wait in the backlog until then); StartupError naming ``setting`` if it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        if exc.errno == errno.EADDRINUSE:
            reason += f" (another process listens there: stop it or choose {setting})"
        raise StartupError(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock
