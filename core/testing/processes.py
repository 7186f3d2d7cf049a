"""Start a command for a test in a process group of its own, and leave nothing behind.

``turnout serve --processes N`` and other servers start processes of their own; killing only the
process a test started would leave those running (and their temporary files behind). A
:class:`GroupProcess` runs the command as the leader of a new session, with ``TMPDIR`` pointing
at a directory of its own; :meth:`GroupProcess.stop` signals the whole group, waits until no
process of it is left, and removes that directory::

    with GroupProcess([sys.executable, "-m", "turnout", "serve", ...]) as serving:
        ...serving.proc.pid...
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

__all__ = ["GroupProcess", "group_alive"]


def group_alive(pgid: int) -> bool:
    """True while a live process of the process group ``pgid`` exists (a zombie that nothing
    reaps does not count, where ``/proc`` tells them apart)."""
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # gone meanwhile
                continue
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                return True
        return False
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of the group we may not signal: it exists
        return True
    return True


class GroupProcess:
    """``argv`` started as the leader of its own process group, with a private ``TMPDIR``.

    ``popen`` arguments other than ``env`` and ``start_new_session`` go to
    :class:`subprocess.Popen`; ``env`` adds variables to this process's environment.
    """

    def __init__(
        self, argv: Sequence[str], *, env: dict[str, str] | None = None, **popen: Any
    ) -> None:
        #: The directory the command's temporary files go to (removed by :meth:`stop`).
        self.tmpdir = Path(tempfile.mkdtemp(prefix="turnout-test-"))
        environment = {**os.environ, "TMPDIR": str(self.tmpdir), **(env or {})}
        try:
            self.proc: subprocess.Popen[Any] = subprocess.Popen(
                list(argv), env=environment, start_new_session=True, **popen
            )
        except BaseException:
            shutil.rmtree(self.tmpdir, ignore_errors=True)
            raise
        #: The process group (the leader's pid).
        self.pgid = self.proc.pid

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to every process of the group (none left: nothing happens)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)

    def wait_group(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until the leader is reaped and no process of the
        group is left; True when none is."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None and not group_alive(self.pgid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the group (none when ``grace_s`` is 0), SIGKILL what is left after
        ``grace_s``, wait for every process of the group, and remove the ``TMPDIR``.
        Returns the leader's exit status."""
        try:
            if grace_s > 0:
                self.signal_group(signal.SIGTERM)
                if self.wait_group(grace_s):
                    return self.proc.returncode
            self.signal_group(signal.SIGKILL)
            self.proc.wait(10)
            if not self.wait_group(10):
                raise RuntimeError(f"processes of group {self.pgid} survived SIGKILL")
            return self.proc.returncode
        finally:
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
            shutil.rmtree(self.tmpdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
