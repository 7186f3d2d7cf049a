"""One of several serving processes, as the supervisor starts it (:mod:`turnout.server.supervisor`):
``python -m turnout.server.serving_process --listen-fd N --control-fd M --supervisor-pid P``.

It serves the supervisor's listening socket with the config received on the control connection,
reloads through the supervisor (so that every process applies the same config), and drains and
exits when the supervisor tells it to or is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import itertools
import logging
import os
import signal
import socket
import sys
import threading
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn

from turnout.config import Config
from turnout.errors import ApiError, StartupError
from turnout.observability.logs import configure_logging
from turnout.server.context import Services
from turnout.server.reload import apply_config, rejected
from turnout.server.runner import build, uvicorn_settings
from turnout.server.shutdown import DrainingServer
from turnout.server.supervisor import RELOAD_WAIT_S

log = logging.getLogger(__name__)

#: prctl(2) option: the signal this process gets when its parent dies (Linux).
_PR_SET_PDEATHSIG = 1
#: How long a reload asked of this process waits for the supervisor's answer.
_ANSWER_WAIT_S = RELOAD_WAIT_S + 10


def die_with_supervisor(supervisor_pid: int) -> None:
    """Have SIGTERM (a drain) sent to this process when the supervisor dies. On Linux the
    kernel does it; elsewhere the closed control connection tells (:class:`SupervisorLink`)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != supervisor_pid:  # it died before the kernel was told to tell us
        os.kill(os.getpid(), signal.SIGTERM)


class SupervisorLink:
    """This process's end of its control connection: applies the configs the supervisor sends,
    asks it for reloads, and starts a drain when the connection closes."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()
        self._attached = threading.Event()
        self._services: Services | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[tuple[int, dict[str, Any]]]] = {}
        self._reader = threading.Thread(
            target=self._read, name="turnout-supervisor-link", daemon=True
        )

    def start(self) -> None:
        self._reader.start()

    def attach(self, services: Services) -> None:
        """The app is up (call on its loop): reloads apply to ``services`` from now on."""
        self._services = services
        self._loop = asyncio.get_running_loop()
        self._attached.set()
        self._send(("ready",))

    async def reload_all(self) -> dict[str, Any]:
        """Have the supervisor reload every process; what changed, or the ApiError saying why
        not (``POST /admin/reload``)."""
        token = next(self._tokens)
        future: asyncio.Future[tuple[int, dict[str, Any]]] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting[token] = future
        try:
            if not self._send(("reload", token)):
                raise ApiError(503, "turnout is shutting down", code="shutting_down")
            status, body = await asyncio.wait_for(future, _ANSWER_WAIT_S)
        except TimeoutError:
            raise ApiError(
                503,
                f"the reload did not finish within {_ANSWER_WAIT_S:g}s",
                code="reload_incomplete",
            ) from None
        finally:
            self._waiting.pop(token, None)
        if status != 200:
            raise ApiError(status, body["message"], code=body.get("code"))
        return body

    def _send(self, message: tuple[Any, ...]) -> bool:
        try:
            with self._send_lock:
                self._conn.send(message)
        except (OSError, ValueError):  # the supervisor is gone
            return False
        return True

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                break
            if message[0] == "apply":
                self._apply(message[1], message[2])
            elif message[0] == "reloaded":
                self._answer(message[1], (message[2], message[3]))
        # The supervisor stopped us, or died: drain (a second SIGTERM changes nothing).
        log.info("the supervisor closed its connection: shutting down", extra={"request_id": "-"})
        os.kill(os.getpid(), signal.SIGTERM)
        self._answer_all((503, {"message": "turnout is shutting down", "code": "shutting_down"}))

    def _answer(self, token: int, answer: tuple[int, dict[str, Any]]) -> None:
        loop = self._loop
        if loop is None:
            return

        def resolve() -> None:
            future = self._waiting.get(token)
            if future is not None and not future.done():
                future.set_result(answer)

        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(resolve)

    def _answer_all(self, answer: tuple[int, dict[str, Any]]) -> None:
        for token in list(self._waiting):
            self._answer(token, answer)

    def _apply(self, reload_id: int, config: Config) -> None:
        """Apply ``config`` on the app's loop and tell the supervisor how it went."""
        reply: tuple[Any, ...]
        if not self._attached.wait(RELOAD_WAIT_S):
            reply = ("failed", reload_id, 503, "it was still starting")
        else:
            assert self._services is not None
            assert self._loop is not None
            try:
                changes = asyncio.run_coroutine_threadsafe(
                    apply_config(self._services, config), self._loop
                ).result(RELOAD_WAIT_S)
                reply = ("applied", reload_id, changes)
            except StartupError as exc:
                reply = ("failed", reload_id, 400, rejected(exc).message)
            except Exception as exc:
                log.exception("applying the reloaded configuration failed")
                reply = ("failed", reload_id, 500, f"{type(exc).__name__}: {exc}")
        self._send(reply)


def remove_orphaned_metrics(directory: Path) -> None:
    """Remove this process's metric files from the directory of a supervisor that died, and
    the directory once no live process has files there. The processes take turns (a lock on
    the directory), so the last one to exit removes it."""
    try:
        import fcntl
    except ImportError:  # no flock: leave it
        return
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        me = os.getpid()
        live = False
        for file in directory.glob("*.db"):
            pid = file.stem.rsplit("_", 1)[-1]
            if not pid.isdigit() or int(pid) == me:
                file.unlink(missing_ok=True)
            elif _alive(int(pid)):
                live = True
        if not live:
            for file in directory.iterdir():
                file.unlink(missing_ok=True)
            directory.rmdir()
    except OSError:
        pass
    finally:
        os.close(handle)


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        stat = ""
    if stat:
        return stat[stat.rindex(")") + 2 :].split()[0] != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _exit_now(sig: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def main(argv: list[str] | None = None) -> int:
    """Serve until the supervisor stops this process (SIGTERM or its connection closes)."""
    parser = argparse.ArgumentParser(prog="turnout-serving-process")
    parser.add_argument("--listen-fd", type=int, required=True)
    parser.add_argument("--control-fd", type=int, required=True)
    parser.add_argument("--supervisor-pid", type=int, required=True)
    parser.add_argument("--owned-metrics-dir", type=Path)
    args = parser.parse_args(argv)
    die_with_supervisor(args.supervisor_pid)
    # Until uvicorn takes the signals over, and after it gives them back (it raises a signal it
    # caught again once it has drained): exit through ``finally`` rather than die outright.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_now)
    conn = Connection(args.control_fd)
    listener = socket.socket(fileno=args.listen_fd)
    try:
        kind, config = conn.recv()
    except (EOFError, OSError):
        return 1  # the supervisor is gone already
    assert kind == "config"
    assert isinstance(config, Config)
    configure_logging(config.server.log_level, config.server.log_json)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the supervisor reloads every process
    link = SupervisorLink(conn)
    link.start()
    try:
        _, app = build(config, reload_all=link.reload_all, on_started=link.attach)
        server = DrainingServer(uvicorn.Config(app, **uvicorn_settings(config.server)))
        server.run(sockets=[listener])
    except StartupError as exc:
        print(f"turnout: error: {exc}", file=sys.stderr)
        return 2
    finally:
        if args.owned_metrics_dir is not None and os.getppid() != args.supervisor_pid:
            remove_orphaned_metrics(args.owned_metrics_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
