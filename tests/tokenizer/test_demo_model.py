"""The project's demo model directory, loaded by turnout and by transformers: same results."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.tokenizer.helpers import PIECES
from turnout.tokenizer import ChatTemplateError, ModelTokenizer

demo_model = pytest.importorskip("turnout.demo_model")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    transformers = pytest.importorskip("transformers")

CONVERSATIONS: list[tuple[list[dict[str, Any]], dict[str, Any]]] = [
    ([{"role": "user", "content": "Hello! 你好 😀"}], {}),
    (
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
            {"role": "user", "content": "3+3?"},
        ],
        {},
    ),
    ([{"role": "user", "content": "Think."}], {"enable_thinking": False}),
    (
        [{"role": "user", "content": "Weather?"}],
        {"tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]},
    ),
]


@pytest.fixture(scope="module")
def demo_dir() -> Path:
    return Path(demo_model.path())


@pytest.fixture(scope="module")
def hf(demo_dir: Path) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoTokenizer.from_pretrained(str(demo_dir))


def test_demo_model_matches_transformers(demo_dir: Path, hf: Any) -> None:
    tok = ModelTokenizer.from_dir(demo_dir)
    assert tok.eos_token_ids == {2993, 2995}
    text = "".join(PIECES)
    for add in (True, False):
        assert tok.encode(text, add_special_tokens=add) == hf.encode(text, add_special_tokens=add)
    ids = tok.encode(text, add_special_tokens=False) + sorted(tok.eos_token_ids)
    for skip in (True, False):
        assert tok.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip)
        detok = tok.incremental_detokenizer(skip_special_tokens=skip)
        streamed = "".join(detok.push(ids[i : i + 3]) for i in range(0, len(ids), 3))
        assert streamed + detok.finish() == hf.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize(("messages", "kwargs"), CONVERSATIONS)
def test_demo_chat_template_matches_transformers(
    demo_dir: Path, hf: Any, messages: list[dict[str, Any]], kwargs: dict[str, Any]
) -> None:
    tok = ModelTokenizer.from_dir(demo_dir)
    try:
        expected = hf.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True, **kwargs
        )
    except Exception:
        with pytest.raises(ChatTemplateError):
            tok.apply_chat_template(messages, **kwargs)
        return
    text, ids = tok.encode_chat(messages, **kwargs)
    assert text == expected
    assert ids == hf.encode(expected, add_special_tokens=False)
