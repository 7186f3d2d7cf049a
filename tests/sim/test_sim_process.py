"""``turnout sim`` as a child process, its CLI checks, and the control RPCs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from turnout.sim import SimProcess, SimWorker, get_records, refuse_connections, set_knobs
from turnout.sim.cli import main
from turnout.wire import WorkerCallError, WorkerClient

from ..wire._helpers import fold, request


async def test_subprocess_serves_and_takes_knobs_at_run_time(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text('{"rules": [{"match": "ping", "reply": "pong"}]}')
    async with SimProcess("--script", str(script), "--delay-ms", "1") as proc:
        assert proc.url.startswith("grpc://127.0.0.1:")
        assert proc.port > 0
        async with WorkerClient(proc.url) as client:
            out = await fold(client.generate(request("ping", request_id="p1")))
            assert out.text(skip_special=True) == "pong"
            knobs = await set_knobs(proc.url, fail_status="UNAVAILABLE", fault_budget=1)
            assert knobs["fail_status"] == "UNAVAILABLE"
            assert knobs["delay_ms"] == 1
            with pytest.raises(WorkerCallError):
                await fold(client.generate(request("ping", request_id="p2")))
            records = await get_records(proc.url)
            assert records["requests"] == ["p1", "p2"]
            assert records["outcomes"] == {"p1": "stop", "p2": "error"}
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await set_knobs(proc.url, no_such_knob=1)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert proc.proc is None  # stopped


async def test_refuse_connections_for_a_while() -> None:
    async with SimWorker(port=0) as sim, WorkerClient(sim.url) as client:
        await refuse_connections(sim.url, 0.3)
        await asyncio.sleep(0.15)
        assert not sim.serving
        with pytest.raises(WorkerCallError) as info:
            await client.health_check(timeout_s=1.0)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        await asyncio.sleep(0.4)
        assert sim.serving
        await client.wait_ready(3.0)
        assert (await client.health_check()).healthy


async def test_subprocess_cache_flags_and_its_event_subscriptions() -> None:
    flags = ("--kv-cache-tokens", "256", "--block-size", "8", "--prefill-tokens-per-s", "1e6")
    async with SimProcess(*flags) as proc, WorkerClient(proc.url) as client:
        async with client.subscribe_kv_events() as events:
            await fold(client.generate(request("cache me if you can", request_id="c1")))
            # A snapshot (cleared, then what is stored), in one batch or, on a busy machine,
            # in several.
            stored = []
            while not stored:
                batch = await asyncio.wait_for(anext(events), 5)
                stored = [e.stored for e in batch.events if e.HasField("stored")]
        load = (await client.get_loads()).loads[0]
        records = await get_records(proc.url)
    assert stored[0].blocks[0].block_size == 8
    assert load.max_total_num_tokens == 256
    assert records["kv_subscriptions"] == [0]


def test_python_dash_m_reports_bad_arguments() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "turnout.sim", "--tokens-per-chunk", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--tokens-per-chunk" in result.stderr


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--fail-status", "NOPE"], "--fail-status"),
        (["--delay-ms", "-1"], "--delay-ms"),
        (["--port", "70000"], "--port"),
        (["--block-size", "0"], "--block-size"),
        (["--kv-cache-tokens", "-1"], "--kv-cache-tokens"),
        (["--prefill-tokens-per-s", "-5"], "--prefill-tokens-per-s"),
        (["--kv-events-keep", "0"], "--kv-events-keep"),
    ],
)
def test_cli_rejects_bad_values(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def test_cli_reports_a_missing_model_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--port", "0", "--model-path", str(tmp_path)]) == 2
    assert "tokenizer.json" in capsys.readouterr().err


def test_cli_reports_a_bad_script(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: [{match: x}]")
    assert main(["--port", "0", "--script", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_subprocess_that_cannot_start_is_reported(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited"):
        SimProcess("--model-path", str(tmp_path)).start()


async def test_taken_port_is_an_error() -> None:
    async with SimWorker(port=0) as first:
        with pytest.raises(OSError, match="cannot listen"):
            await SimWorker(port=first.port).start()
