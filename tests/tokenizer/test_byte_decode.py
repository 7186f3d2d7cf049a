"""Byte-level output decoded in Python: exactly ``Tokenizer.decode``, or not used at all."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from turnout.demo_model import path as demo_path
from turnout.tokenizer import ModelTokenizer
from turnout.tokenizer.byte_decode import ByteDecoder, byte_decoder

from .helpers import PIECES, SPECIALS
from .test_detokenizer import _tokenizer

BYTE_LEVEL = ["demo", "deepseek", "byte_level_bpe"]


def backend(kind: str) -> Tokenizer:
    if kind == "demo":
        return ModelTokenizer.from_dir(demo_path()).backend
    return _tokenizer(kind)


_DECODERS: dict[str, ByteDecoder | None] = {}


def fast(kind: str) -> ByteDecoder:
    if kind not in _DECODERS:
        _DECODERS[kind] = byte_decoder(backend(kind))
    decoder = _DECODERS[kind]
    assert decoder is not None, f"{kind} is byte-level: its output decodes in Python"
    return decoder


@pytest.mark.parametrize("kind", BYTE_LEVEL)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), skip=st.booleans())
def test_any_ids_decode_as_the_tokenizer_decodes_them(
    kind: str, data: st.DataObject, skip: bool
) -> None:
    """Arbitrary ids: split characters (U+FFFD), special and added tokens, either skip."""
    tok = backend(kind)
    added = sorted(tok.get_added_tokens_decoder())
    size = tok.get_vocab_size(with_added_tokens=True)
    token = st.integers(0, size - 1)
    if added:
        token = st.one_of(token, st.sampled_from(added))
    ids = data.draw(st.lists(token, max_size=40))
    assert fast(kind).decode(ids, skip) == tok.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("kind", BYTE_LEVEL)
@settings(max_examples=60, deadline=None)
@given(text=st.lists(st.sampled_from([*PIECES, *SPECIALS]), max_size=40).map("".join))
def test_encoded_text_decodes_back(kind: str, text: str) -> None:
    tok = backend(kind)
    ids = tok.encode(text, add_special_tokens=False).ids
    for skip in (False, True):
        assert fast(kind).decode(ids, skip) == tok.decode(ids, skip_special_tokens=skip)


def test_ids_beyond_the_vocabulary_are_skipped_as_the_tokenizer_skips_them() -> None:
    tok = backend("demo")
    ids = [*tok.encode("hello world", add_special_tokens=False).ids, 10**6]
    assert fast("demo").decode(ids) == tok.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("kind", ["sentencepiece_bpe", "metaspace_unigram"])
def test_other_vocabularies_keep_the_tokenizer_decode(kind: str) -> None:
    assert byte_decoder(_tokenizer(kind)) is None


def test_output_of_a_byte_level_model_is_decoded_in_python(deepseek_dir: Path) -> None:
    """The model's detokenizers use the Python decode; streamed deltas still add up."""
    tok = ModelTokenizer.from_dir(deepseek_dir)
    detok = tok.incremental_detokenizer()
    assert detok._decode_ids == tok._fast_decoder.decode  # type: ignore[union-attr]
    text = "".join(PIECES) + "ok 👨‍👩‍👧 done"
    ids = tok.encode(text, add_special_tokens=False)
    for size in (1, 3, len(ids)):
        detok = tok.incremental_detokenizer()
        deltas = [detok.push(ids[i : i + size]) for i in range(0, len(ids), size)]
        assert "".join(itertools.chain(deltas, [detok.finish()])) == tok.decode(ids, True)
