"""The token-count lower bound from a text's length: sound where it is given, absent where a
tokenizer can drop or fold text."""

from __future__ import annotations

import functools
import json
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from turnout.demo_model import path as demo_path
from turnout.tokenizer.length_bound import chars_per_token, min_tokens

from .helpers import PIECES, SPECIALS
from .test_detokenizer import _tokenizer


def _with(backend: Tokenizer, **changes: object) -> Tokenizer:
    data = json.loads(backend.to_str())
    data.update(changes)
    return Tokenizer.from_str(json.dumps(data))


def _demo() -> Tokenizer:
    return Tokenizer.from_file(str(demo_path() / "tokenizer.json"))


def _nfc_byte_level() -> Tokenizer:
    """Qwen2 style: an NFC normalizer in front of byte-level BPE."""
    return _with(_tokenizer("byte_level_bpe"), normalizer={"type": "NFC"})


BOUNDED = {
    "demo": _demo,
    "deepseek": lambda: _tokenizer("deepseek"),
    "byte_level_bpe": lambda: _tokenizer("byte_level_bpe"),
    "sentencepiece_bpe": lambda: _tokenizer("sentencepiece_bpe"),
    "nfc_byte_level": _nfc_byte_level,
}


@functools.cache
def bounded(name: str) -> tuple[Tokenizer, int]:
    backend = BOUNDED[name]()
    bound = chars_per_token(backend)
    assert bound is not None
    return backend, bound


# Decomposed sequences that NFC composes into one code point (up to 4 into 1), long runs.
COMPOSING = ["\u03b1\u0314\u0300\u0345", "e\u0301", "\u1100\u1161\u11a8", "a\u0308"]
texts = st.lists(
    st.sampled_from([*PIECES, *SPECIALS, *COMPOSING, " " * 40, "." * 64, "=" * 33]), max_size=80
).map("".join)


@pytest.mark.parametrize("name", sorted(BOUNDED))
@settings(max_examples=100, deadline=None)
@given(text=texts)
def test_the_bound_never_exceeds_the_real_count(name: str, text: str) -> None:
    backend, bound = bounded(name)
    for add_special_tokens in (False, True):
        ids = backend.encode(text, add_special_tokens=add_special_tokens).ids
        assert len(ids) >= min_tokens(len(text), bound)


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_the_bound_is_tight_for_the_longest_token(name: str) -> None:
    """Repeating the longest vocabulary entry (as text) is the worst case the bound allows."""
    backend, bound = bounded(name)
    vocab = backend.get_vocab(with_added_tokens=True)
    longest = max(vocab, key=len)
    text = backend.decode([vocab[longest]], skip_special_tokens=False) * 50
    assert len(backend.encode(text, add_special_tokens=False).ids) >= min_tokens(len(text), bound)


def test_nfc_composes_at_most_four_code_points_into_one() -> None:
    """The composing normalizers' factor: no canonical decomposition is longer than 4."""
    longest = max(len(unicodedata.normalize("NFD", chr(c))) for c in range(0x110000))
    assert longest <= 4
    assert chars_per_token(_nfc_byte_level()) == 4 * chars_per_token(_tokenizer("byte_level_bpe"))  # type: ignore[operator]


def _wordpiece() -> Tokenizer:
    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def _with_lstrip_token() -> Tokenizer:
    tok = _demo()
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True)])
    return tok


def _truncating() -> Tokenizer:
    tok = _demo()
    tok.enable_truncation(16)
    return tok


def _strip_normalizer() -> Tokenizer:
    tok = _demo()
    tok.normalizer = normalizers.Strip()
    return tok


# Each tokenizer folds a long text into few tokens, so no bound from length holds.
UNBOUNDED = {
    "wordpiece": (
        _wordpiece,
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa zzzzzzzzzzzzzzzzz",
    ),
    "whitespace_dropped": (
        lambda: _with(_demo(), pre_tokenizer={"type": "WhitespaceSplit"}),
        " " * 500 + "a",
    ),
    "strip": (_strip_normalizer, " " * 500 + "a"),
    "lstrip_added_token": (_with_lstrip_token, " " * 500 + "<mask>"),
    "truncation": (_truncating, "hello world " * 100),
    "unigram_fusing_unknowns": (lambda: _tokenizer("metaspace_unigram"), "𝔘" * 300),
}


@pytest.mark.parametrize("name", sorted(UNBOUNDED))
def test_no_bound_where_text_can_vanish(name: str) -> None:
    factory, text = UNBOUNDED[name]
    backend = factory()
    assert chars_per_token(backend) is None
    # The reason: this text has fewer tokens than the longest entry could cover.
    longest = max(len(token) for token in backend.get_vocab(with_added_tokens=True))
    assert len(backend.encode(text, add_special_tokens=False).ids) < len(text) / longest


def test_min_tokens() -> None:
    assert min_tokens(0, 13) == 0
    assert min_tokens(26, 13) == 2
    assert min_tokens(27, 13) == 3
    assert min_tokens(10**9, None) == 0
