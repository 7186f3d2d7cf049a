"""Piecewise (cached) prompt encoding gives exactly the tokenizer's own ids."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer

from turnout.demo_model import path as demo_path
from turnout.tokenizer import ModelTokenizer, TooManyTokens
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


@pytest.mark.parametrize("name", sorted(CACHES))
@settings(max_examples=40, deadline=None)
@given(text=prompts)
def test_long_text_encoding_equals_the_tokenizer(name: str, text: str) -> None:
    """encode_long (batched misses, for tokenizer threads) gives the same ids, cached or not."""
    backend, _ = CACHES[name]
    cache = SegmentCache(backend)
    expected = backend.encode(text, add_special_tokens=False).ids
    assert cache.encode_long(text) == expected
    assert cache.encode_long(text) == expected
    assert cache.encode(text) == expected


def test_long_text_over_the_limit_raises_with_its_count() -> None:
    backend, cache = CACHES["demo"]
    text = "<|im_start|>user\n" + "many words here " * 50 + "<|im_end|>"
    count = len(backend.encode(text, add_special_tokens=False).ids)
    assert (
        cache.encode_long(text, max_tokens=count)
        == backend.encode(text, add_special_tokens=False).ids
    )
    with pytest.raises(TooManyTokens) as caught:
        SegmentCache(backend).encode_long(text, max_tokens=count - 1)
    assert (caught.value.tokens, caught.value.limit, caught.value.at_least) == (
        count,
        count - 1,
        False,
    )


def test_a_huge_piece_does_not_flush_the_cache() -> None:
    backend, _ = CACHES["demo"]
    cache = SegmentCache(backend, max_chars=8000)
    cache.encode("<|im_start|>system\nYou are a careful assistant.<|im_end|>")
    kept = dict(cache._pieces)
    cache.encode_long("<|im_start|>user\n" + "x y " * 1000 + "<|im_end|>")
    assert kept.items() <= cache._pieces.items()


def test_short_pieces_between_tokens_are_cached_too() -> None:
    """The short pieces of every chat prompt (``"\\n"``, ``"assistant\\n"``) come from the cache,
    not from a tokenizer call per request."""
    backend, _ = CACHES["demo"]
    cache = SegmentCache(backend)
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert cache.encode(text) == backend.encode(text, add_special_tokens=False).ids
    assert {"user\nhi", "\n", "assistant\n"} <= cache._pieces.keys()


def test_many_short_pieces_stay_within_the_bound() -> None:
    """Each piece counts at least 64 characters against the bound, whatever its length."""
    backend, _ = CACHES["demo"]
    cache = SegmentCache(backend, max_chars=64 * 10)
    for n in range(100):
        text = f"<|im_start|>{n}<|im_end|>"
        assert cache.encode(text) == backend.encode(text, add_special_tokens=False).ids
    assert len(cache._pieces) == 10
