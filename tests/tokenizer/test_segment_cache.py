"""Piecewise (cached) prompt encoding gives exactly the tokenizer's own ids."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer

from turnout.demo_model import path as demo_path
from turnout.tokenizer import ModelTokenizer
from turnout.tokenizer.segment_cache import SegmentCache

from .helpers import PIECES, SPECIALS
from .test_detokenizer import KINDS, _tokenizer

CHAT_MARKERS = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</think>", "user\n", "\n"]
prompts = st.lists(st.sampled_from([*PIECES, *SPECIALS, *CHAT_MARKERS]), max_size=60).map("".join)


def caches() -> dict[str, tuple[Tokenizer, SegmentCache]]:
    found = {"demo": ModelTokenizer.from_dir(demo_path()).backend}
    found |= {kind: _tokenizer(kind) for kind in KINDS}
    return {name: (backend, SegmentCache(backend)) for name, backend in found.items()}


CACHES = caches()


@pytest.mark.parametrize("name", sorted(CACHES))
@settings(max_examples=60, deadline=None)
@given(text=prompts)
def test_piecewise_encoding_equals_the_tokenizer(name: str, text: str) -> None:
    backend, cache = CACHES[name]
    expected = backend.encode(text, add_special_tokens=False).ids
    assert cache.encode(text) == expected
    assert cache.encode(text) == expected  # and again, from the cache


def test_repeated_conversation_parts_are_encoded_once() -> None:
    tokenizer = ModelTokenizer.from_dir(demo_path())
    system = {"role": "system", "content": "You are a careful assistant. " * 30}
    first = tokenizer.apply_chat_template([system, {"role": "user", "content": "first question"}])
    tokenizer.encode(first, add_special_tokens=False)
    pieces = len(tokenizer._segments._pieces)
    second = tokenizer.apply_chat_template([system, {"role": "user", "content": "next question"}])
    assert tokenizer.encode(second, add_special_tokens=False) == (
        tokenizer.backend.encode(second, add_special_tokens=False).ids
    )
    assert len(tokenizer._segments._pieces) == pieces + 1  # only the new user turn was new


def test_tokens_that_strip_whitespace_are_left_to_the_tokenizer() -> None:
    backend = Tokenizer.from_file(str(demo_path() / "tokenizer.json"))
    backend.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True)])
    cache = SegmentCache(backend)
    text = "<|im_start|>user\nfill  <mask>  here<|im_end|>"
    assert cache.encode(text) == backend.encode(text, add_special_tokens=False).ids
