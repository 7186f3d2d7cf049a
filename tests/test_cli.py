"""The ``turnout`` command as a user runs it, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

EXAMPLE_PLUGIN = REPO_ROOT / "examples" / "turnout-example-plugin"


def run_turnout(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "turnout", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_plugins_json_lists_builtins_with_patterns() -> None:
    result = run_turnout("plugins", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (builtin,) = [p for p in report["plugins"] if p["distribution"] == "turnout"]
    qwen = next(item for item in builtin["tool_parsers"] if item["name"] == "qwen")
    assert "hermes" in qwen["aliases"]
    assert "*qwen*" in qwen["models"]
    assert {"random", "round_robin"} <= {p["name"] for p in builtin["policies"]}
    assert report["failures"] == []


def test_bad_config_exits_2_with_the_key_and_no_traceback(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("server:\n  port: high\n")
    result = run_turnout("check", "--config", str(config))
    assert result.returncode == 2
    assert "server.port: Expected `int`, got `str` (got 'high')" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin pip-installed into its own site directory (next to turnout)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
         str(EXAMPLE_PLUGIN)],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    return target


def test_pip_installed_third_party_plugin_is_listed(example_site: Path) -> None:
    result = run_turnout("plugins", "--json", env={"PYTHONPATH": str(example_site)})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (example,) = [p for p in report["plugins"] if p["distribution"] == "turnout-example-plugin"]
    assert example["version"] == "0.1.0"
    assert [p["name"] for p in example["tool_parsers"]] == ["bracket_calls"]
    assert example["tool_parsers"][0]["models"] == ["example-*"]
    assert [p["name"] for p in example["policies"]] == ["pinned"]
    assert [p["name"] for p in example["discovery"]] == ["static_list"]


def test_config_can_select_the_third_party_plugin(example_site: Path, tmp_path: Path) -> None:
    config = tmp_path / "turnout.yaml"
    config.write_text(
        "workers: [{url: 'grpc://127.0.0.1:1', model: example-7b}]\n"
        "models:\n  example-7b: {policy: {name: pinned, params: {url: 'grpc://127.0.0.1:1'}}}\n"
        "discovery: [{provider: static_list, options: {urls: ['grpc://127.0.0.1:2']}}]\n"
    )
    result = run_turnout("check", "--config", str(config), env={"PYTHONPATH": str(example_site)})
    assert result.returncode == 0, result.stderr
    assert "example-7b: tool_parser=bracket_calls" in result.stdout
    assert "policy=pinned" in result.stdout
    assert "1 listed worker(s)" in result.stdout
    without = run_turnout("check", "--config", str(config), env={"TURNOUT_PLUGINS": "turnout"})
    assert without.returncode == 2
    assert "unknown policy 'pinned'" in without.stderr


def test_the_example_plugins_own_tests_pass_with_the_shipped_harness(
    example_site: Path, tmp_path: Path
) -> None:
    """Its tests use turnout.testing the way a plugin author does (tox -e pkg runs them too,
    from the wheel)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(EXAMPLE_PLUGIN / "tests")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(example_site)},
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
    assert "failed" not in result.stdout
    assert "skipped" not in result.stdout


def test_prefill_and_decode_flags_make_a_pd_fleet(tmp_path: Path) -> None:
    config = tmp_path / "pd.yaml"
    demo = REPO_ROOT / "core" / "demo_model"
    config.write_text(f"models:\n  m: {{tokenizer_path: {demo}}}\n")
    result = run_turnout(
        "check", "--config", str(config), "--policy", "round_robin",
        "--prefill", "grpc://10.0.0.1:30000", "9000", "--prefill", "grpc://10.0.0.2:30000", "none",
        "--decode", "grpc://10.0.0.3:30000", "--decode-policy", "power_of_two",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (
        "m: tool_parser=None reasoning_parser=None policy=round_robin "
        "prefill_policy=cache_aware decode_policy=power_of_two"
    ) in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefill", "grpc://h:1", "x"], "the bootstrap port must be a number or 'none'"),
        (["--prefill", "grpc://h:1", "1", "2"], "--prefill: expected URL [BOOTSTRAP_PORT]"),
        (["--prefill", "grpc://h:1", "70000"], "--prefill grpc://h:1 (bootstrap_port): "),
    ],
)
def test_bad_prefill_flags_exit_2(args: list[str], message: str) -> None:
    result = run_turnout("check", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
