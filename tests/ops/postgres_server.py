"""A real PostgreSQL server (Debian package ``postgresql``) on a free loopback port, its data
in a temporary directory, without durability (fsync off: tests only).

Where the binaries (``initdb``, ``postgres``; on ``PATH`` or under
``/usr/lib/postgresql/<version>/bin``) are missing the tests that need it skip, and fail under
CI (``.ci/run`` installs them). PostgreSQL refuses to run as root: as root the server runs as
the user ``postgres`` (or ``nobody``)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.ci_skips import in_ci
from tests.server.harness import free_port


def postgres_bin_dir() -> Path:
    """The directory of ``initdb`` and ``postgres`` (the newest version installed); skips the
    test (fails it under CI) when there is none."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(found).resolve().parent  # (a link's target: its siblings are there)
    installed = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not installed:
        message = "PostgreSQL is not installed (apt-get install postgresql)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    newest = max(installed, key=lambda path: int(Path(path).parts[-3].split(".")[0]))
    return Path(newest).parent


def _server_user() -> pwd.struct_passwd | None:
    """Who runs the server: None (the current user) unless that is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    pytest.fail("running as root and neither user postgres nor nobody exists")


def _with_children(pid: int) -> list[int]:
    """A process and its children (the postmaster and its backends, one per connection)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # pid (comm) state ppid …: comm may hold spaces, so split after its ')'
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
    return [pid, *children]


class PostgresServer:
    """One PostgreSQL cluster (made by ``initdb``) and its server, trusting local
    connections of the user ``turnout``; :meth:`stop` and :meth:`start` again keep the data
    and the port. :meth:`close` removes everything."""

    def __init__(self) -> None:
        self._bin = postgres_bin_dir()
        self._user = _server_user()
        # Not under pytest's tmp_path: its parents may be closed to the server's user.
        self.directory = Path(tempfile.mkdtemp(prefix="turnout-postgres-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        if self._user is not None:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        self.port = free_port()
        self.url = f"postgres://turnout@127.0.0.1:{self.port}/postgres"
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self._run(
                [str(self._bin / "initdb"), "-D", str(self.data), "-U", "turnout",
                 "-A", "trust", "-E", "UTF8", "--no-sync"]
            )  # fmt: skip
            self.start()
        except BaseException:
            self.close()
            raise

    def _as_server_user(self, command: list[str]) -> list[str]:
        """``command`` run as the server's user: through ``setpriv``, which executes it in its
        place. (Not ``subprocess``'s ``user=``: that forks the whole test process, running the
        fork handlers of gRPC's threads, which may crash the child before it executes.)"""
        if self._user is None:
            return command
        setpriv = shutil.which("setpriv")
        assert setpriv is not None, "running as root needs setpriv (util-linux)"
        return [setpriv, f"--reuid={self._user.pw_uid}", f"--regid={self._user.pw_gid}",
                "--clear-groups", *command]  # fmt: skip

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(
            self._as_server_user(command),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=self.directory,
        )
        assert done.returncode == 0, f"{command[0]} failed: {done.stdout}{done.stderr}"

    def start(self, limit_s: float = 60.0) -> None:
        """Start the server and wait until it accepts connections."""
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self._as_server_user(
                    [str(self._bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                     "-k", str(self.directory), "-c", "listen_addresses=127.0.0.1",
                     "-F", "-c", "full_page_writes=off", "-c", "synchronous_commit=off"]
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
            )  # fmt: skip
        deadline = time.monotonic() + limit_s
        while not self.ready():
            assert self.proc.poll() is None, (
                f"postgres exited ({self.proc.returncode}): {self.log.read_text()}"
            )
            assert time.monotonic() < deadline, f"postgres did not start: {self.log.read_text()}"
            time.sleep(0.05)

    def ready(self) -> bool:
        """True when the server accepts connections."""
        done = subprocess.run(
            [
                str(self._bin / "pg_isready"),
                "-q",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "turnout",
            ],
            check=False,
            timeout=10,
        )
        return done.returncode == 0

    def psql(self, sql: str) -> str:
        """The output of SQL commands through ``psql`` (unaligned, tuples only) in the
        database of :attr:`url`."""
        return self.psql_in(self.url, sql)

    def psql_in(self, url: str, sql: str) -> str:
        """The output of SQL commands through ``psql`` in the database of ``url``."""
        done = subprocess.run(
            [str(self._bin / "psql"), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-d", url, "-c", sql],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def pause(self) -> None:
        """Freeze the server, every backend included: connections are accepted by the
        kernel, nothing is answered."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)  # first: it starts no backend after the list
        for pid in _with_children(self.proc.pid):
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        for pid in _with_children(self.proc.pid):
            os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (fast shutdown: connections are closed)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        for pid in _with_children(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)  # (paused: it could not shut down)
        proc.send_signal(signal.SIGINT)  # fast shutdown
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """Stop the server and remove its data."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
