"""Pieces of the benchmark harness: percentiles, /proc accounting, profile parsing, ratios."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from bench import procfs
from bench.profiling import area_of, parse_collapsed
from bench.report import check_targets, ratios, render_results
from bench.stats import percentile, summarize_ms
from bench.workload import make_body, read_json_answer


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="percentile"):
        percentile(values, 101)


def test_summarize_reports_milliseconds() -> None:
    summary = summarize_ms([0.010, 0.020, 0.030])
    assert summary["p50"] == 20.0
    assert summary["max"] == 30.0
    assert summary["mean"] == 20.0
    assert summarize_ms([])["p99"] is None


def test_process_tree_cpu_counts_busy_grandchild() -> None:
    # a shell whose child burns CPU: the tree below the shell must include it
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
    code += "time.sleep(5)"
    shell = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} -c '{code}' & wait"])
    try:
        deadline = time.monotonic() + 10
        sample = procfs.sample_tree(shell.pid)
        while time.monotonic() < deadline and sample.cpu_s < 0.3:
            time.sleep(0.1)
            sample = procfs.sample_tree(shell.pid)
        assert len(sample.pids) >= 2
        assert sample.pids[0] == shell.pid
        assert sample.cpu_s >= 0.3
        assert sample.rss > 1 << 20
    finally:
        for pid in procfs.tree_pids(shell.pid)[1:]:
            os.kill(pid, 15)
        shell.wait(10)


def test_vanished_process_counts_nothing() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert procfs.tree_pids(proc.pid) == []
    assert procfs.cpu_seconds([proc.pid]) == 0.0


def test_connections_by_pid_tells_accepted_from_opened_connections() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                me, gone = os.getpid(), _vanished_pid()
                pids = [me, gone]
                assert procfs.connections_by_pid(pids, local_port=port) == {me: 1, gone: 0}
                assert procfs.connections_by_pid(pids, remote_ports=[port]) == {me: 1, gone: 0}
                assert procfs.connections_by_pid([me], remote_ports=[client.getsockname()[1]]) == {
                    me: 1
                }
        assert procfs.connections_by_pid([me], local_port=port) == {me: 0}


def _vanished_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


_ROOT = 'process 1:"python -m turnout serve";thread (11): MainThread;main (core/cli.py:1)'
RAW = "\n".join(
    [
        f"{_ROOT};route (core/server/app.py:60);_read (grpc/aio/_call.py:400) 6",
        f"{_ROOT};route (core/server/app.py:60);encode (core/tokenizer/model_tokenizer.py:9) 3",
        "thread (12): Thread-2 (_poll_wrapper);run (threading.py:971) 1",
        "garbage line without count",
    ]
)


def test_parse_collapsed_self_inclusive_threads() -> None:
    profile = parse_collapsed(RAW)
    assert profile.total == 10
    top = profile.top(5)
    assert top["self"][0] == {
        "function": "grpc: _read (grpc/aio/_call.py)",
        "samples": 6,
        "share": 0.6,
    }
    inclusive = {row["function"]: row["samples"] for row in top["inclusive_turnout"]}
    assert inclusive == {
        "turnout: route (core/server/app.py)": 9,
        "turnout: encode (core/tokenizer/model_tokenizer.py)": 3,
    }  # the entry frame in core/cli.py is left out
    assert top["threads"] == {"MainThread": 0.9, "Thread-2 (_poll_wrapper)": 0.1}
    assert top["areas"] == {"grpc": 0.6, "turnout": 0.3, "stdlib/other": 0.1}


def test_area_of_paths() -> None:
    assert area_of("core/server/app.py") == "turnout"
    assert area_of("plugins/policies/simple.py") == "turnout.plugins"
    assert area_of("/x/site-packages/litestar/app.py") == "litestar"
    assert area_of("asyncio/runners.py") == "asyncio"
    assert area_of("/x/site-packages/prometheus_client/values.py") == "prometheus_client"
    assert area_of("threading.py") == "stdlib/other"


def _measurement(rps: float, cpu_ms: float) -> dict[str, object]:
    return {
        "requests_per_s": rps,
        "output_tokens_per_s": rps * 128,
        "latency_ms": {"p50": 10.0, "p99": 20.0},
        "ttft_ms": {"p50": None, "p99": None},
        "router_cpu": {"ms_per_request": cpu_ms, "us_per_token": cpu_ms / 128 * 1000},
        "errors": 0,
    }


def test_ratios_and_targets() -> None:
    results = {
        "chat": {"turnout": _measurement(60, 0.9), "smg": _measurement(100, 1.0)},
        "chat_stream": {"turnout": _measurement(40, 9.0), "smg": _measurement(100, 3.0)},
    }
    results["chat_stream"]["turnout"]["ttft_ms"] = {"p50": 30.0, "p99": 40.0}
    results["chat_stream"]["smg"]["ttft_ms"] = {"p50": 10.0, "p99": 40.0}
    table = ratios(results, "turnout", "smg")
    assert table["chat"]["requests_per_s"] == 0.6
    assert table["chat"]["cpu_per_request"] == 0.9
    assert table["chat"]["ttft_p50"] is None
    assert table["chat_stream"]["ttft_p50"] == 3.0
    checks = {c["target"]: c["met"] for c in check_targets(table, results, 32)}
    assert checks == {
        "cpu per non-streaming chat request": True,
        "streaming TTFT p50 at c=32": False,
        "streaming TTFT p99 at c=32": True,
        "throughput (chat)": True,
        "throughput (chat_stream)": False,
    }
    text = render_results({"results": results, "ratios": {"turnout/smg": table}, "targets": []})
    assert "chat_stream" in text
    assert "turnout/smg (same run" in text


def test_bodies_pin_the_output_length() -> None:
    chat = make_body("chat_stream", "m", "hi", 128)
    assert b'"ignore_eos":true' in chat
    assert b'"max_tokens":128' in chat
    assert b'"include_usage":true' in chat
    generate = make_body("generate", "m", "hi", 64)
    assert b'"max_new_tokens":64' in generate
    with pytest.raises(ValueError, match="unknown scenario"):
        make_body("embed", "m", "hi", 1)


def test_json_answers() -> None:
    ok = read_json_answer(200, b'{"usage": {"completion_tokens": 128}}')
    assert (ok.tokens, ok.error) == (128, None)
    array = read_json_answer(200, b'[{"meta_info": {"completion_tokens": 5}}]')
    assert array.tokens == 5
    bad = read_json_answer(503, b'{"error": {"message": "no worker"}}')
    assert bad.error == "HTTP 503: no worker"
    assert read_json_answer(200, b"not json").error is not None
    assert read_json_answer(200, b"{}").error is not None
