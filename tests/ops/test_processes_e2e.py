"""``turnout serve --processes 2`` under faults, as an operator meets them: reload (SIGHUP and
``POST /admin/reload``) reaches every serving process, SIGTERM drains them all, and nothing
outlives a killed supervisor (no process on the port, no copy of the config)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench import procfs
from tests.server.harness import free_port
from tests.support import bearer, wait_for
from turnout.demo_model import path as demo_path
from turnout.sim import SimProcess, get_counters

from .helpers import MODEL, Serve, StartServe, chat

CHAT = "/v1/chat/completions"
KEYS = ["kept-key", "revoked-by-route", "revoked-by-sighup"]
ADMIN = {"authorization": "Bearer admin-key"}


def models_status(server: Serve, key: str) -> int:
    """``GET /v1/models`` with ``key`` on a new connection (any serving process may take it)."""
    return httpx.get(f"{server.base_url}/v1/models", headers=bearer(key), timeout=10).status_code


def children(server: Serve) -> list[int]:
    """The serving processes: every process under the supervisor."""
    return [pid for pid in procfs.tree_pids(server.proc.pid) if pid != server.proc.pid]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def accepts(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start(serve: StartServe) -> Serve:
    server = serve({"processes": 2, "api_keys": KEYS, "admin_api_key": "admin-key"})
    wait_for(lambda: len(children(server)) >= 2, "two serving processes", 30)
    # Both ready (a process that dies before it is ready stops the router, by design).
    wait_for(lambda: server.log.read_text().count("turnout ready") >= 2, "both ready", 60)
    return server


def test_reload_by_route_or_sighup_reaches_every_process(serve: StartServe) -> None:
    server = start(serve)
    assert all(models_status(server, key) == 200 for key in KEYS for _ in range(2))

    server.config["server"]["api_keys"] = [KEYS[0], KEYS[2]]
    server.write_config()
    reply = httpx.post(f"{server.base_url}/admin/reload", headers=ADMIN, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "reloaded"
    assert reply.json()["processes"] == 2
    # Each request on a new connection: the two processes take turns at accepting them.
    assert [models_status(server, KEYS[1]) for _ in range(20)] == [401] * 20
    assert [models_status(server, KEYS[0]) for _ in range(6)] == [200] * 6

    server.config["server"]["api_keys"] = [KEYS[0]]
    server.write_config()
    server.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: models_status(server, KEYS[2]) == 401, "the SIGHUP reload", 20)
    assert [models_status(server, KEYS[2]) for _ in range(20)] == [401] * 20
    assert [models_status(server, KEYS[0]) for _ in range(6)] == [200] * 6


def test_a_reload_that_fails_says_so_and_changes_nothing(serve: StartServe) -> None:
    server = start(serve)
    server.path.write_text("server: [this is: not a mapping\n")
    reply = httpx.post(f"{server.base_url}/admin/reload", headers=ADMIN, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert "rejected" in error["message"]
    assert str(server.path) in error["message"]
    assert isinstance(error["code"], str)
    assert [models_status(server, KEYS[1]) for _ in range(10)] == [200] * 10


def test_sigterm_drains_every_process(sim: SimProcess, serve: StartServe) -> None:
    """In-flight requests finish; requests arriving meanwhile are answered (503) or refused at
    connect, never reset (as one process drains)."""
    server = start(serve)
    body = chat(max_tokens=80)  # 30 ms a token: 2.4 s each

    def ask() -> int | str:
        url = f"{server.base_url}{CHAT}"
        try:
            return httpx.post(url, json=body, headers=bearer(KEYS[0]), timeout=30).status_code
        except httpx.ConnectError:
            return "refused"
        except httpx.HTTPError as exc:
            return type(exc).__name__

    stopped = threading.Event()

    def keep_asking() -> list[int | str]:
        outcomes = []
        while not stopped.is_set():
            outcomes.append(ask())
            time.sleep(0.02)
        return outcomes

    with ThreadPoolExecutor(16) as pool:
        # Warm both processes up (each opens its channel to the worker on its first request).
        assert list(pool.map(lambda _: ask(), range(8))) == [200] * 8
        in_flight = [pool.submit(ask) for _ in range(8)]
        wait_for(
            lambda: asyncio.run(get_counters(sim.url))["running"] >= 8, "requests in flight", 10
        )
        arriving = [pool.submit(keep_asking) for _ in range(6)]
        time.sleep(0.1)
        signalled = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        assert [reply.result() for reply in in_flight] == [200] * 8
        assert server.proc.wait(20) == 0
        took = time.monotonic() - signalled
        stopped.set()
        late = [outcome for outcomes in arriving for outcome in outcomes.result()]
    assert took < 10
    assert set(late) <= {200, 503, "refused"}, late
    assert "refused" in late


def test_nothing_outlives_a_killed_supervisor(serve: StartServe) -> None:
    server = start(serve)
    serving = children(server)
    tmpdir = server.group.tmpdir

    def copies_of_the_keys() -> list[Path]:
        found = []
        for directory, _, files in os.walk(tmpdir):
            for name in files:
                path = Path(directory, name)
                try:
                    if KEYS[1].encode() in path.read_bytes():
                        found.append(path)
                except OSError:
                    pass
        return found

    assert copies_of_the_keys() == []  # the config is handed over without a file
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(5)
    wait_for(lambda: not any(alive(pid) for pid in serving), "the serving processes to exit", 15)
    assert not accepts(server.port)
    assert copies_of_the_keys() == []
    wait_for(lambda: not any(tmpdir.iterdir()), "the serving processes' files to go", 5)


def test_closing_a_router_of_several_processes_leaves_nothing_behind(
    sim: SimProcess, tmp_path: Path
) -> None:
    server = Serve(tmp_path, sim.url, {"processes": 2})
    server.wait_ready()
    wait_for(lambda: len(children(server)) >= 2, "two serving processes", 30)
    everything = procfs.tree_pids(server.proc.pid)
    tmpdir = server.group.tmpdir
    server.close()
    assert [pid for pid in everything if alive(pid)] == []
    assert not tmpdir.exists()


def test_a_serving_process_that_dies_is_replaced(serve: StartServe) -> None:
    server = start(serve)
    first, second = children(server)[:2]
    os.kill(first, signal.SIGKILL)
    wait_for(
        lambda: first not in children(server) and len(children(server)) == 2,
        "a replacement",
        60,  # a new process imports and builds its app: slow on a loaded machine
    )
    assert second in children(server)
    wait_for(lambda: models_status(server, KEYS[0]) == 200, "readiness", 10)
    assert [models_status(server, KEYS[0]) for _ in range(10)] == [200] * 10


def test_a_bad_name_stops_the_start_with_one_line(sim: SimProcess) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "turnout", "serve", "--processes", "2", "--policy", "nosuch",
         "--worker-urls", sim.url, "--port", str(free_port())],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("turnout: error:")]
    assert errors == [errors[0]]
    assert "unknown policy 'nosuch'" in errors[0]
    assert "Traceback" not in result.stderr


def test_reasoning_sealed_by_one_process_opens_in_every_other(
    tmp_path: Path, sim: SimProcess
) -> None:
    """``include: reasoning.encrypted_content`` with no ``responses.reasoning_key``: the
    supervisor gives every process one key, so a stateless loop may land anywhere."""
    models = {MODEL: {"tokenizer_path": str(demo_path()), "reasoning_parser": "qwen3"}}
    server = Serve(tmp_path, sim.url, {"processes": 2}, config={"models": models})
    try:
        server.wait_ready()
        wait_for(lambda: len(children(server)) >= 2, "two serving processes", 30)
        url = f"{server.base_url}/v1/responses"
        first = httpx.post(
            url,
            json={"model": MODEL, "input": "<think>the plan</think>done", "store": False,
                  "include": ["reasoning.encrypted_content"]},
            timeout=30,
        ).json()  # fmt: skip
        reasoning = first["output"][0]
        assert reasoning["type"] == "reasoning"
        item = {"type": "reasoning", "id": reasoning["id"], "summary": [],
                "encrypted_content": reasoning["encrypted_content"]}  # fmt: skip
        follow_up = {"model": MODEL, "store": False,
                     "input": [item, {"role": "user", "content": "go on"}]}  # fmt: skip
        for _ in range(8):  # a new connection each time: either process may take it
            reply = httpx.post(url, json=follow_up, timeout=30)
            assert reply.status_code == 200, reply.text
    finally:
        server.close()
