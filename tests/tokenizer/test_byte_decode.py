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
from turnout.tokenizer.byte_decode import ByteDecoder, ByteLevelDetokenizer, byte_decoder

from .helpers import PIECES, SPECIALS, assert_never_half_a_character, stream
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
    """The model's detokenizers decode in Python; streamed deltas still add up."""
    tok = ModelTokenizer.from_dir(deepseek_dir)
    detok = tok.incremental_detokenizer()
    assert isinstance(detok, ByteLevelDetokenizer)
    text = "".join(PIECES) + "ok 👨‍👩‍👧 done"
    ids = tok.encode(text, add_special_tokens=False)
    for size in (1, 3, len(ids)):
        detok = tok.incremental_detokenizer()
        deltas = [detok.push(ids[i : i + size]) for i in range(0, len(ids), size)]
        assert "".join(itertools.chain(deltas, [detok.finish()])) == tok.decode(ids, True)


@pytest.mark.parametrize("kind", BYTE_LEVEL)
@settings(max_examples=150, deadline=None)
@given(data=st.data(), skip=st.booleans())
def test_streamed_deltas_add_up_to_the_one_shot_decode(
    kind: str, data: st.DataObject, skip: bool
) -> None:
    """Arbitrary ids cut anywhere (characters split over chunks, invalid UTF-8, special
    tokens): the deltas and the finish add up to ``Tokenizer.decode`` of all the ids."""
    tok = backend(kind)
    size = tok.get_vocab_size(with_added_tokens=True)
    ids = data.draw(st.lists(st.integers(0, size - 1), max_size=40))
    cuts = data.draw(st.lists(st.integers(0, 60), max_size=12))
    deltas = stream(fast(kind).stream(skip), ids, cuts)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("kind", BYTE_LEVEL)
@settings(max_examples=60, deadline=None)
@given(text=st.lists(st.sampled_from([*PIECES, *SPECIALS]), max_size=30).map("".join))
def test_a_streamed_delta_never_shows_half_a_character(kind: str, text: str) -> None:
    """One token at a time, the text shown so far is a prefix of the whole decode, with no
    U+FFFD the whole decode lacks."""
    tok = backend(kind)
    ids = tok.encode(text, add_special_tokens=False).ids
    full = tok.decode(ids, skip_special_tokens=True)
    assert_never_half_a_character(fast(kind).stream(), ids, full)


def test_a_fork_replays_without_changing_the_original() -> None:
    tok = backend("demo")
    ids = tok.encode("caf\u00e9 \U0001f600 ok", add_special_tokens=False).ids
    # Stop inside the emoji's bytes: the decoder holds an incomplete character.
    split = next(i for i in range(1, len(ids)) if "\ufffd" in tok.decode(ids[:i]))
    detok = fast("demo").stream()
    head = detok.push(ids[:split])
    twin = detok.fork()
    assert "".join(stream(twin, ids[split:], [])) == tok.decode(ids)[len(head) :]
    assert head + "".join(stream(detok, ids[split:], [1])) == tok.decode(ids)


def test_streamed_ids_beyond_the_vocabulary_show_nothing() -> None:
    tok = backend("demo")
    ids = tok.encode("hello world", add_special_tokens=False).ids
    detok = fast("demo").stream()
    text = detok.push([*ids[:1], 10**6]) + detok.push([10**6]) + detok.push(ids[1:])
    assert text + detok.finish() == tok.decode([*ids, 10**6], skip_special_tokens=True)
