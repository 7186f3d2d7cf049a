"""``--router-cpus``: the CPU list, the plan, and pinning a real process tree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cpus import parse_cpus, pin_tree, plan_cpus
from bench.procfs import tree_pids
from bench.run import main


def test_parse_cpus_lists_and_ranges() -> None:
    assert parse_cpus("1") == {1}
    assert parse_cpus("0,2") == {0, 2}
    assert parse_cpus("2-4, 7") == {2, 3, 4, 7}
    for bad in ("", "a", "3-1", "-1", "1,,2"):
        with pytest.raises(ValueError, match="not a CPU list"):
            parse_cpus(bad)


def test_plan_gives_the_workers_what_the_routers_leave() -> None:
    plan = plan_cpus(frozenset({1}), frozenset({0, 1}))
    assert plan.routers == {1}
    assert plan.others == {0}
    assert "routers pinned to CPU 1" in plan.describe()
    with pytest.raises(ValueError, match="every CPU"):
        plan_cpus(frozenset({0, 1}), frozenset({0, 1}))
    with pytest.raises(ValueError, match="not available"):
        plan_cpus(frozenset({5}), frozenset({0, 1}))


def test_pin_tree_moves_every_thread_of_every_process(tmp_path: Path) -> None:
    script = tmp_path / "tree.py"
    script.write_text(
        "import subprocess, sys, threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "if sys.argv[1:] == ['parent']:\n"
        "    subprocess.Popen([sys.executable, __file__, 'child'])\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, str(script), "parent"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "up\n"
        target = frozenset({min(os.sched_getaffinity(0))})
        deadline = time.monotonic() + 10
        threads: list[int] = []
        while time.monotonic() < deadline:  # until the grandchild and both threads are up
            threads = _threads_below(proc.pid)
            if len(threads) >= 4:
                break
            time.sleep(0.05)
        assert len(threads) >= 4
        assert pin_tree(proc.pid, target) >= 4
        for tid in _threads_below(proc.pid):
            assert os.sched_getaffinity(tid) == target
    finally:
        for pid in reversed(tree_pids(proc.pid)):
            os.kill(pid, 9)
        proc.wait()


def test_bad_router_cpus_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--router-cpus", "4096", "--scenarios", "chat"]) == 2
    assert "--router-cpus" in capsys.readouterr().err


def _threads_below(root: int) -> list[int]:
    return [
        int(entry.name) for pid in tree_pids(root) for entry in Path(f"/proc/{pid}/task").iterdir()
    ]
