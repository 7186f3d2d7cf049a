"""Logprob token bytes: each token's real bytes, read from the vocabulary (not the lossy decode
of the token alone)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tokenizer.helpers import PIECES, SPECIALS
from tests.tokenizer.test_detokenizer import KINDS, _tokenizer
from turnout.tokenizer.token_bytes import TokenPieces, vocabulary_kind

texts = st.lists(st.sampled_from([*PIECES, *SPECIALS]), min_size=1, max_size=30).map("".join)


def pieces(kind: str) -> TokenPieces:
    tok = _tokenizer(kind)
    added = {i: t.content for i, t in tok.get_added_tokens_decoder().items()}
    return TokenPieces(tok, added)


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=60, deadline=None)
@given(text=texts)
def test_token_bytes_add_up_to_the_text(kind: str, text: str) -> None:
    tok = _tokenizer(kind)
    table = pieces(kind)
    ids = tok.encode(text, add_special_tokens=False).ids
    joined = b"".join(table.piece(i)[1] for i in ids).decode("utf-8")
    decoded = tok.decode(ids, skip_special_tokens=False)
    # SentencePiece decoders drop the space they prepended to the first word.
    assert joined in (decoded, " " + decoded)


def test_a_token_inside_a_character_has_its_real_bytes() -> None:
    table = pieces("byte_level_bpe")
    tok = _tokenizer("byte_level_bpe")
    ids = tok.encode("🐙 漢", add_special_tokens=False).ids
    partial = [i for i in ids if "\ufffd" in table.piece(i)[0]]
    assert partial, "the sample must split a character across tokens"
    for token_id in partial:
        text, raw = table.piece(token_id)
        assert text == tok.decode([token_id])  # what clients see as the token: unchanged
        assert raw != text.encode("utf-8")
    assert b"".join(table.piece(i)[1] for i in ids) == "🐙 漢".encode()


def test_vocabulary_kinds_are_read_from_the_decoder() -> None:
    assert vocabulary_kind(_tokenizer("byte_level_bpe")) == "byte_level"
    assert vocabulary_kind(_tokenizer("sentencepiece_bpe")) == "sentencepiece"
    assert vocabulary_kind(_tokenizer("metaspace_unigram")) == "sentencepiece"


def test_byte_fallback_tokens_are_single_bytes() -> None:
    tok = _tokenizer("sentencepiece_bpe")
    table = pieces("sentencepiece_bpe")
    assert table.piece(tok.token_to_id("<0x0A>"))[1] == b"\n"
    assert table.piece(tok.token_to_id("<0xE4>"))[1] == b"\xe4"


def test_added_tokens_are_their_content() -> None:
    tok = _tokenizer("byte_level_bpe")
    table = pieces("byte_level_bpe")
    assert table.piece(tok.token_to_id("<|eos|>")) == ("<|eos|>", b"<|eos|>")
