"""A sound lower bound on a text's token count from its length alone (no tokenization).

A prompt that cannot fit the model's context should be refused before it is tokenized, which
costs about a second per megabyte. Every token stands for at most ``L`` characters of the
normalized text, ``L`` being the longest vocabulary entry (byte-level entries count one
character per byte, which covers at most one character of text), so a text of ``n``
characters has at least ``n / L`` tokens — provided that no step of the tokenizer drops
characters or merges an unbounded run of them into one token. That holds for the pipelines LLM
tokenizers use (byte-level BPE, SentencePiece-style BPE with byte fallback), and it is checked
here component by component: a normalizer may shrink the text by a known factor (NFC composes
at most 4 code points into one), anything unknown — whitespace-dropping pre-tokenizers,
``[UNK]`` that swallows a whole word, added tokens that strip the whitespace around them,
truncation — gives no bound at all (``None``), and then only tokenization can tell.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from tokenizers import Tokenizer
from tokenizers.pre_tokenizers import ByteLevel

#: The most code points that canonical composition (NFC/NFKC) turns into one: the longest
#: canonical decomposition of any character (e.g. U+1F82) has 4.
_MAX_COMPOSED = 4

#: Normalizers that never make the text shorter (decomposition, case folding, prefixing, and
#: the byte-level mapping all map each character to one or more).
_KEEPING_NORMALIZERS = frozenset({"NFD", "NFKD", "Lowercase", "Prepend", "ByteLevel"})
_COMPOSING_NORMALIZERS = frozenset({"NFC", "NFKC"})
#: Pre-tokenizers that split text without removing any of it.
_KEEPING_PRE_TOKENIZERS = frozenset(
    {"ByteLevel", "Metaspace", "Digits", "Punctuation", "UnicodeScripts", "FixedLength"}
)


def chars_per_token(backend: Tokenizer) -> int | None:
    """The most characters of input text any one token can stand for, or ``None`` when the
    tokenizer may drop text or fold unbounded runs into a token (no bound from length holds)."""
    config: dict[str, Any] = json.loads(backend.to_str())
    if config.get("truncation") is not None:
        return None
    shrink = _normalizer_shrink(config.get("normalizer"))
    if shrink is None or not _keeps_text(config.get("pre_tokenizer")):
        return None
    if not _model_keeps_text(config.get("model") or {}, config.get("pre_tokenizer")):
        return None
    added = config.get("added_tokens") or []
    if any(token.get("lstrip") or token.get("rstrip") for token in added):
        return None
    vocab = backend.get_vocab(with_added_tokens=True)
    if not vocab:
        return None
    return max(len(token) for token in vocab) * shrink


def min_tokens(text_length: int, chars_per_token: int | None) -> int:
    """The fewest tokens a text of ``text_length`` characters can have (0 without a bound)."""
    if chars_per_token is None or chars_per_token <= 0:
        return 0
    return math.ceil(text_length / chars_per_token)


def _normalizer_shrink(normalizer: Mapping[str, Any] | None) -> int | None:
    """By how much a normalizer may shorten the text at most (1: never), ``None``: unbounded."""
    if normalizer is None:
        return 1
    kind = normalizer.get("type")
    if kind in _KEEPING_NORMALIZERS:
        return 1
    if kind in _COMPOSING_NORMALIZERS:
        return _MAX_COMPOSED
    if kind == "Sequence":
        factor = 1
        for part in normalizer.get("normalizers") or []:
            shrink = _normalizer_shrink(part)
            if shrink is None:
                return None
            factor *= shrink
        return factor
    if kind == "Replace":
        pattern = normalizer.get("pattern") or {}
        literal, content = pattern.get("String"), normalizer.get("content")
        if isinstance(literal, str) and literal and isinstance(content, str) and content:
            return max(1, math.ceil(len(literal) / len(content)))
    return None  # Strip, StripAccents, BertNormalizer, Precompiled, regex Replace, unknown


def _keeps_text(pre_tokenizer: Mapping[str, Any] | None) -> bool:
    if pre_tokenizer is None:
        return True
    kind = pre_tokenizer.get("type")
    if kind == "Sequence":
        return all(_keeps_text(part) for part in pre_tokenizer.get("pretokenizers") or [])
    if pre_tokenizer.get("behavior") == "Removed":
        return False
    return kind == "Split" or kind in _KEEPING_PRE_TOKENIZERS


def _uses_byte_level(pre_tokenizer: Mapping[str, Any] | None) -> bool:
    if pre_tokenizer is None:
        return False
    if pre_tokenizer.get("type") == "Sequence":
        return any(_uses_byte_level(part) for part in pre_tokenizer.get("pretokenizers") or [])
    return pre_tokenizer.get("type") == "ByteLevel"


def _model_keeps_text(model: Mapping[str, Any], pre_tokenizer: Mapping[str, Any] | None) -> bool:
    """Whether every character reaches some token (no drop, no unbounded ``unk`` fusion)."""
    if model.get("byte_fallback"):
        return True
    if model.get("type") != "BPE":
        return False  # WordPiece/WordLevel: one [UNK] for a whole word; Unigram fuses unknowns
    if _uses_byte_level(pre_tokenizer):
        # Byte-level text only has the 256 byte characters: all must be in the vocabulary.
        vocab = model.get("vocab") or {}
        return all(char in vocab for char in ByteLevel.alphabet())
    # Characters outside the vocabulary become one unk each, unless fused or dropped.
    return model.get("unk_token") is not None and not model.get("fuse_unk")
