"""Claude Code (npm ``@anthropic-ai/claude-code``, headless ``claude -p``) pointed at the router
with ``ANTHROPIC_BASE_URL`` completes a task that needs a tool call: the sim's script plays the
model (it calls ``Read`` on a file, then answers with what the tool result holds), Qwen3's real
chat template renders Claude Code's prompts (tens of thousands of tokens of system text and
tools: the demo model gets a long context).

The ``claude`` binary is found on ``PATH`` or at ``$CLAUDE_CODE_BIN``; without it the test is
skipped (``npm install -g @anthropic-ai/claude-code`` installs it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.server.harness import MODEL, run_router
from tests.tokenizer.helpers import TEMPLATES
from turnout.demo_model import path as demo_path

QWEN3 = TEMPLATES / "Qwen-Qwen3-0.6B.jinja"
CLAUDE = os.environ.get("CLAUDE_CODE_BIN") or shutil.which("claude")
MARKER = "turnout-marker-4217"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_shared,
    pytest.mark.skipif(not QWEN3.is_file(), reason=f"shared fixture not found: {QWEN3}"),
    pytest.mark.skipif(
        CLAUDE is None,
        reason="Claude Code not installed: npm install -g @anthropic-ai/claude-code, or set "
        "CLAUDE_CODE_BIN",
    ),
]


def long_context_model(directory: Path) -> Path:
    """The demo model with a context long enough for Claude Code's prompts."""
    model = directory / "long-model"
    shutil.copytree(demo_path(), model)
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 262144
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_claude_code_completes_a_task_with_a_tool_call(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    marker = work / "marker.txt"
    marker.write_text(MARKER + "\n")
    call = {"name": "Read", "arguments": {"file_path": str(marker)}}
    script = tmp_path / "script.yaml"
    # Replies as Qwen3 writes them with thinking on: a <think> block first.
    rules = [
        {
            "match": MARKER,
            "reply": f"<think>\nThe tool read it.\n</think>\n\nThe file says {MARKER}.",
        },
        {
            "match": "marker.txt",
            "reply": "<think>\nI need to read the file.\n</think>\n\n"
            f"<tool_call>\n{json.dumps(call)}\n</tool_call>",
        },
    ]
    script.write_text(yaml.safe_dump({"rules": rules, "default": "Nothing to do."}))
    home = tmp_path / "home"
    home.mkdir()
    with run_router(
        sims=1,
        model_dir=long_context_model(tmp_path),
        sim_kwargs={"script": script, "max_total_tokens": 1 << 20},
        model={"chat_template": str(QWEN3), "tool_parser": "qwen", "reasoning_parser": "qwen3"},
    ) as router:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": router.base_url,
            "ANTHROPIC_API_KEY": "dummy",
            "ANTHROPIC_MODEL": MODEL,
            "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
            "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
            "DISABLE_TELEMETRY": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }
        assert CLAUDE is not None
        done = subprocess.run(
            [CLAUDE, "-p", "Read the file marker.txt and tell me what it says.",
             "--allowedTools", "Read"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )  # fmt: skip
        requests = router.sims[0].requests
    assert done.returncode == 0, done.stderr + done.stdout
    assert MARKER in done.stdout
    prompts = [r.tokenized.original_text for r in requests]
    # The second turn carried the tool's result (the file's text) back to the model.
    assert any(MARKER in prompt and "<tool_response>" in prompt for prompt in prompts)
