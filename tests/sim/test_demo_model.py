"""The shipped demo model directory: small, reproducible, and usable by tokenizer tooling."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from turnout import demo_model

ROOT = Path(__file__).resolve().parents[2]


def _load_trainer():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "train_demo_tokenizer", ROOT / "scripts" / "train_demo_tokenizer.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_files_present_and_small() -> None:
    d = demo_model.path()
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "config.json",
        "generation_config.json",
    ):
        assert (d / name).is_file(), name
    assert (d / "tokenizer.json").stat().st_size < 1_000_000


def test_special_tokens_and_eos() -> None:
    d = demo_model.path()
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    config = json.loads((d / "config.json").read_text())
    gen = json.loads((d / "generation_config.json").read_text())
    im_end, eot = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    assert config["eos_token_id"] == gen["eos_token_id"] == [im_end, eot]
    assert config["_name_or_path"] == demo_model.MODEL_ID == "turnout-demo"
    assert config["vocab_size"] == tok.get_vocab_size()
    text = (
        '<|im_start|>assistant\n<think>\nok\n</think>\n\n<tool_call>\n{"name": "f"}\n</tool_call>'
    )
    ids = tok.encode(text).ids
    for tag in ("<|im_start|>", "<think>", "</think>", "<tool_call>", "</tool_call>"):
        assert tok.token_to_id(tag) in ids, tag
    # Chat markup is special (dropped when skipping specials); tool/think tags are not.
    assert tok.decode(ids, skip_special_tokens=True) == text.removeprefix("<|im_start|>")
    assert tok.decode(tok.encode("naïve 日本 🙂 x").ids) == "naïve 日本 🙂 x"


def test_chat_template_renders_tools_and_thinking_switch() -> None:
    jinja2 = pytest.importorskip("jinja2")
    config = json.loads((demo_model.path() / "tokenizer_config.json").read_text())
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = json.dumps
    template = env.from_string(config["chat_template"])
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": '{"c": 1}'}}],
        },
        {"role": "tool", "content": "sunny"},
    ]
    out = template.render(
        messages=messages, tools=tools, add_generation_prompt=True, enable_thinking=False
    )
    assert '<tools>\n{"name": "get_weather", "parameters": {}}\n</tools>' in out
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"c": 1}}\n</tool_call>' in out
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n" in out
    assert out.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    plain = template.render(messages=messages[:1], add_generation_prompt=True)
    assert plain == "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n"


def test_trainer_reproduces_committed_files(tmp_path: Path) -> None:
    trainer = _load_trainer()
    trainer.write_model_dir(tmp_path, trainer.DEFAULT_VOCAB_SIZE)
    committed = demo_model.path()
    for name in ("tokenizer_config.json", "config.json", "generation_config.json"):
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name
    fresh = json.loads((tmp_path / "tokenizer.json").read_text())
    ours = json.loads((committed / "tokenizer.json").read_text())
    assert fresh["model"]["vocab"] == ours["model"]["vocab"]
    assert fresh["model"]["merges"] == ours["model"]["merges"]
    assert fresh["added_tokens"] == ours["added_tokens"]
