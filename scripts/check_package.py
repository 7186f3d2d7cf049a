"""Packaging check: build turnout's wheel, install it with the example plugin into a fresh venv,
run the installed ``turnout`` there, and the example plugin's own tests (``turnout.testing``).
Catches missing packages, package data, extras and entry points."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str | Path, cwd: Path | None = None) -> str:
    print("+", " ".join(str(a) for a in args), flush=True)
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    dist = work / "dist"
    venv = work / "fresh"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", dist, ROOT)
    (wheel,) = dist.glob("turnout-*.whl")
    run(sys.executable, "-m", "venv", "--clear", venv)
    python = venv / "bin" / "python"
    example = ROOT / "examples/turnout-example-plugin"
    # The example's test extra needs turnout[testing]: the extra must exist in the wheel.
    run(python, "-m", "pip", "install", "--quiet", f"{wheel}[testing]", f"{example}[test]")
    # Run from a directory without the source tree, so only the installed package is seen.
    report = json.loads(run(venv / "bin" / "turnout", "plugins", "--json", cwd=work))
    by_dist = {p["distribution"]: p for p in report["plugins"]}
    assert not report["failures"], report["failures"]
    assert "qwen" in {p["name"] for p in by_dist["turnout"]["tool_parsers"]}, by_dist
    listed = by_dist["turnout-example-plugin"]
    assert [p["name"] for p in listed["tool_parsers"]] == ["bracket_calls"], listed
    assert [p["name"] for p in listed["policies"]] == ["pinned"], listed
    assert [p["name"] for p in listed["discovery"]] == ["static_list"], listed
    # Every lazily registered built-in must import from the wheel.
    check = (
        "import turnout\n"
        "from turnout.plugin_kinds import PLUGIN_KINDS\n"
        "p = turnout.load_plugins()\n"
        "for kind in PLUGIN_KINDS:\n"
        "    reg = p[kind]\n"
        "    for name in reg.names():\n"
        "        reg.factory(name)\n"
        "import turnout.demo_model, turnout.wire, turnout.sim, turnout.server.app\n"
        "assert (turnout.demo_model.path() / 'tokenizer.json').is_file()\n"
        "print('ok')\n"
    )
    assert run(python, "-c", check, cwd=work).strip().endswith("ok")
    # A plugin's own tests with the shipped harness (turnout.testing), as its author runs them.
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", example / "tests", cwd=work)
    print("package check passed")


if __name__ == "__main__":
    main()
