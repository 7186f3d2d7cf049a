"""Several serving processes on one port under a supervisor (``turnout serve --processes N``).

The supervisor binds the port and starts each serving process as ``python -m
turnout.server.serving_process``, handing it the listening socket and one end of a control
connection, over which it sends the config (no copy of it is written to disk). Then it stays in
charge of them:

- SIGHUP, or ``POST /admin/reload`` at any process: the supervisor reads the config again and
  every process applies it; the answer says how many did, or why not.
- SIGTERM/SIGINT: the supervisor closes its copy of the listening socket and every process
  drains as a single one does (:mod:`turnout.server.shutdown`); then it exits.
- A process that dies while serving is replaced; one that fails to start stops the router.
- When the supervisor dies, even by SIGKILL, every process drains and exits: the kernel tells it
  (``PR_SET_PDEATHSIG`` on Linux), and everywhere its control connection closes.

Messages on a control connection (pickled tuples). To a process: ``("config", Config)`` first,
``("apply", reload_id, Config)``, ``("reloaded", token, status, body)``. From a process:
``("ready",)``, ``("reload", token)``, ``("applied", reload_id, changes)``, ``("failed",
reload_id, status, message)``.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec

from turnout.config import Config
from turnout.errors import StartupError
from turnout.generation.models import STARTED_ENV, router_started

log = logging.getLogger(__name__)

#: How long every process gets to apply a reloaded config (models may load tokenizers).
RELOAD_WAIT_S = 60.0
#: After the drain grace, how long processes get to finish their shutdown before SIGKILL.
KILL_MARGIN_S = 10.0
#: Where the metrics of the processes go, unless ``PROMETHEUS_MULTIPROC_DIR`` is set.
METRICS_ENV = "PROMETHEUS_MULTIPROC_DIR"
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(eq=False)
class _Process:
    """A serving process and the supervisor's end of its control connection."""

    popen: subprocess.Popen[bytes]
    conn: Connection
    ready: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid


@dataclass
class _Reload:
    """What the processes answered to one reload."""

    applied: list[dict[str, Any]] = field(default_factory=list)
    #: (status, "process PID: why") of each process that did not apply it.
    failed: list[tuple[int, str]] = field(default_factory=list)


class Supervisor:
    """Runs ``config.server.processes`` serving processes on ``listener`` until SIGTERM/SIGINT.
    ``source`` reads the config again (None: started without a config file)."""

    def __init__(
        self, config: Config, source: Callable[[], Config] | None, listener: socket.socket
    ) -> None:
        #: Seals reasoning alike in every process when the config names no key of its own.
        self._reasoning_key = secrets.token_urlsafe(32)
        self.config = self._shared(config)
        self.source = source
        self.listener = listener
        self.processes: list[_Process] = []
        self.stopping = False
        #: Set when a process failed to start (the router stops).
        self.failed_start = False
        self._reload_ids = 0
        #: Reload requests that arrived while another reload ran: (process, token).
        self._asked: list[tuple[_Process, int]] = []
        self._wake_read, self._wake_write = socket.socketpair()
        for end in (self._wake_read, self._wake_write):
            end.setblocking(False)
        self._env = dict(os.environ)
        self._env.setdefault(STARTED_ENV, str(router_started()))  # one `created` for all
        self._metrics_dir: Path | None = None
        if METRICS_ENV not in self._env:
            self._metrics_dir = Path(tempfile.mkdtemp(prefix="turnout-metrics-"))  # mode 0700
            self._env[METRICS_ENV] = str(self._metrics_dir)

    def run(self) -> int:
        """Serve until told to stop; the exit status (2: a process failed to start)."""
        previous_wakeup = signal.set_wakeup_fd(self._wake_write.fileno(), warn_on_full_buffer=False)
        handled = (*_STOP_SIGNALS, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))
        previous = {sig: signal.signal(sig, _note_signal) for sig in handled}
        try:
            server = self.config.server
            log.info(
                "starting %d serving processes on %s:%d", server.processes, server.host, server.port
            )
            self.processes = [self._start() for _ in range(server.processes)]
            while not self.stopping:
                self._step()
        finally:
            self._stop_all()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            self._wake_read.close()
            self._wake_write.close()
            if self._metrics_dir is not None:
                shutil.rmtree(self._metrics_dir, ignore_errors=True)
        return 2 if self.failed_start else 0

    # -- processes ------------------------------------------------------------------------------

    def _start(self) -> _Process:
        ours, theirs = socket.socketpair()
        argv = [
            sys.executable, "-m", "turnout.server.serving_process",
            "--listen-fd", str(self.listener.fileno()),
            "--control-fd", str(theirs.fileno()),
            "--supervisor-pid", str(os.getpid()),
        ]  # fmt: skip
        if self._metrics_dir is not None:
            argv += ["--owned-metrics-dir", str(self._metrics_dir)]
        try:
            popen = subprocess.Popen(
                argv, env=self._env, pass_fds=(self.listener.fileno(), theirs.fileno())
            )
        finally:
            theirs.close()
        process = _Process(popen, Connection(ours.detach()))
        self._send(process, ("config", self.config))  # if it died already, _step sees its end
        return process

    def _step(self) -> None:
        """Wait for a signal, a message or a process's end, and handle it."""
        for ready in wait([self._wake_read, *(p.conn for p in self.processes)]):
            if ready is self._wake_read:
                self._handle_signals()
                continue
            process = next(p for p in self.processes if p.conn is ready)
            try:
                message = process.conn.recv()
            except (EOFError, OSError):
                self._ended(process)
                continue
            self._handle(process, message)
        if self._asked and not self.stopping:
            asked, self._asked = self._asked, []
            status, body = self.reload()  # one reload answers every request that waited
            for process, token in asked:
                self._send(process, ("reloaded", token, status, body))

    def _handle_signals(self) -> None:
        try:
            numbers = self._wake_read.recv(64)
        except BlockingIOError:
            return
        for number in numbers:
            if number in _STOP_SIGNALS:
                if not self.stopping:
                    log.info(
                        "shutting down: draining %d serving processes (grace %ss)",
                        len(self.processes),
                        self.config.server.shutdown_grace_s,
                    )
                self.stopping = True
            elif number == getattr(signal, "SIGHUP", None) and not self.stopping:
                status, body = self.reload()
                if status == 200:
                    log.info("configuration reloaded on SIGHUP: %s", body)
                else:
                    log.error("reload on SIGHUP failed: %s", body["message"])

    def _handle(self, process: _Process, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "ready":
            process.ready = True
        elif kind == "reload":
            self._asked.append((process, message[1]))
        # "applied"/"failed" outside a reload: a late answer to one that timed out

    def _ended(self, process: _Process) -> None:
        """The process closed its control connection: it exited (or is about to)."""
        self.processes.remove(process)
        process.conn.close()
        try:
            status = process.popen.wait(KILL_MARGIN_S)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            status = process.popen.wait()
        if self.stopping:
            return
        if not process.ready:
            log.error(
                "serving process %d exited with status %s before it was ready: stopping",
                process.pid,
                status,
            )
            self.failed_start = True
            self.stopping = True
            return
        log.warning(
            "serving process %d exited with status %s: starting another", process.pid, status
        )
        self.processes.append(self._start())

    def _send(self, process: _Process, message: tuple[Any, ...]) -> bool:
        try:
            process.conn.send(message)
        except OSError:  # it is gone; _step will see its end
            return False
        return True

    def _stop_all(self) -> None:
        """Drain every process: SIGTERM each, wait for the grace (and a margin), then SIGKILL."""
        # The port refuses new connections once every serving process closed its copy too;
        # kept open here, it would take connections that nothing serves and reset them later.
        self.listener.close()
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.server.shutdown_grace_s + KILL_MARGIN_S
        for process in self.processes:
            try:
                process.popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("serving process %d did not stop in time: killing it", process.pid)
                process.popen.kill()
                process.popen.wait()
            process.conn.close()
        self.processes = []

    # -- reload ---------------------------------------------------------------------------------

    def reload(self) -> tuple[int, dict[str, Any]]:
        """Read the config again and have every process apply it: (HTTP status, body)."""
        if self.source is None:
            return 409, {
                "message": "turnout was started without a config file; there is nothing to reload"
            }
        try:
            new = self.source()
        except StartupError as exc:
            return 400, {"message": f"the new configuration was rejected: {exc}"}
        new = self._shared(new)
        outcome = self._apply_everywhere(new)
        if outcome.applied:
            self.config = new  # a process started from now on serves what the others do
        if not outcome.failed:
            return 200, {"processes": len(outcome.applied), **_merged(outcome.applied)}
        reasons = "; ".join(reason for _, reason in outcome.failed)
        if not outcome.applied and all(status == 400 for status, _ in outcome.failed):
            return 400, {"message": outcome.failed[0][1].split(": ", 1)[1]}
        total = len(outcome.applied) + len(outcome.failed)
        return 503, {
            "message": f"the reload failed in {len(outcome.failed)} of {total} serving "
            f"processes ({len(outcome.applied)} applied it): {reasons}",
            "code": "reload_incomplete",
        }

    def _shared(self, config: Config) -> Config:
        """``config`` with what its processes must share and it leaves to chance: one key
        for sealed reasoning (each process would draw its own, and a reasoning item sealed by
        one could not be opened by another)."""
        if config.responses.reasoning_key is not None:
            return config
        responses = msgspec.structs.replace(config.responses, reasoning_key=self._reasoning_key)
        return msgspec.structs.replace(config, responses=responses)

    def _apply_everywhere(self, new: Config) -> _Reload:
        self._reload_ids += 1
        reload_id = self._reload_ids
        outcome = _Reload()
        waiting: dict[Connection, _Process] = {}
        for process in self.processes:
            if self._send(process, ("apply", reload_id, new)):
                waiting[process.conn] = process
            else:
                outcome.failed.append((503, f"process {process.pid}: it exited"))
        deadline = time.monotonic() + RELOAD_WAIT_S
        while waiting:
            left = deadline - time.monotonic()
            ready = wait(list(waiting), left) if left > 0 else []
            if not ready:
                break
            for conn in ready:
                process = waiting[conn]  # type: ignore[index]
                try:
                    message = process.conn.recv()
                except (EOFError, OSError):  # _step sees the end again and replaces it
                    del waiting[process.conn]
                    outcome.failed.append((503, f"process {process.pid}: it exited"))
                    continue
                if message[0] == "applied" and message[1] == reload_id:
                    del waiting[process.conn]
                    outcome.applied.append(message[2])
                elif message[0] == "failed" and message[1] == reload_id:
                    del waiting[process.conn]
                    outcome.failed.append((message[2], f"process {process.pid}: {message[3]}"))
                else:
                    self._handle(process, message)
        for process in waiting.values():
            outcome.failed.append(
                (503, f"process {process.pid}: no answer within {RELOAD_WAIT_S:g}s")
            )
        return outcome


def _merged(changes: list[dict[str, Any]]) -> dict[str, list[str]]:
    """What changed, over every process (each has its own registry: usually all the same)."""
    merged: dict[str, list[str]] = {}
    for change in changes:
        for key, values in change.items():
            entries = merged.setdefault(key, [])
            entries += [value for value in values if value not in entries]
    return merged


def _note_signal(sig: int, frame: FrameType | None) -> None:
    """Signals reach the supervisor's loop through the wakeup socket."""


def serve_processes(
    config: Config, source: Callable[[], Config] | None, listener: socket.socket
) -> int:
    """Run the serving processes of ``config`` on ``listener``; the exit status."""
    # What every process checks first, checked once here: a bad name is one line, not N.
    from turnout.discovery import describe_discovery
    from turnout.plugin_choice import validate_plugin_names
    from turnout.plugin_loader import load_plugins

    plugins = load_plugins()
    validate_plugin_names(config, plugins)
    describe_discovery(config.discovery, plugins.discovery)
    return Supervisor(config, source, listener).run()
