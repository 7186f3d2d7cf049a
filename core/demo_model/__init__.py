"""turnout's demo model: a tokenizer-only model directory (no weights) for the simulated worker.

Files: ``tokenizer.json`` (byte-level BPE, 3000 tokens, ChatML specials plus ``<tool_call>`` /
``<think>`` tags), ``tokenizer_config.json`` (Qwen-style chat template with tools and
``enable_thinking``), ``config.json`` and ``generation_config.json`` (EOS ids). Regenerate with
``scripts/train_demo_tokenizer.py``.
"""

from __future__ import annotations

from pathlib import Path

MODEL_ID = "turnout-demo"

__all__ = ["MODEL_ID", "path"]


def path() -> Path:
    """Directory holding the demo model's files."""
    return Path(__file__).resolve().parent
