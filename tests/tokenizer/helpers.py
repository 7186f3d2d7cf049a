"""Helpers for the tokenizer tests: sample texts and small tokenizers trained on them."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SHARED = Path(__file__).parents[2].parent / "shared"
TEMPLATES = SHARED / "fixtures" / "chat_templates"

# Pieces that stress decoding: multi-byte UTF-8, emoji sequences, combining marks, spacing.
PIECES = [
    "a", "b", "the", "cat", "Hello", "world", "x", "Z", "42", "7", ".", ",", "!", "?", "'", '"',
    "{", "}", "(", ")", " ", "  ", "   ", "\n", "\n\n", "\t", " \n",
    "é", "ü", "ß", "ø", "e\u0301", "a\u0308", "n\u0303",
    "你好", "世界", "中", "文", "日本語", "カタカナ", "한국어",
    "😀", "🎉", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "∑", "→", "—", "€",
    "Ω", "ж", "λ", "עברית", "العربية", "ไทย",
]  # fmt: skip

SPECIALS = ["<|bos|>", "<|eos|>", "<|tool|>"]


def sample_text(rng: random.Random, words: int) -> str:
    return "".join(rng.choice(PIECES) for _ in range(words))


def _corpus() -> list[str]:
    rng = random.Random(1234)
    return [sample_text(rng, rng.randint(5, 40)) for _ in range(1500)]


def train_byte_level_bpe() -> Tokenizer:
    """GPT-2 style: ByteLevel pre-tokenizer and decoder, BPE model."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    return tok


def train_sentencepiece_bpe() -> Tokenizer:
    """Llama-2 style: "▁" normalizer, BPE with byte fallback, Replace/ByteFallback/Fuse/Strip."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<unk>", *SPECIALS], show_progress=False
    )
    tok.train_from_iterator(_corpus()[:300], trainer)
    data = json.loads(tok.to_str())
    vocab = data["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    data["model"]["byte_fallback"] = True
    data["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    return Tokenizer.from_str(json.dumps(data))


def train_metaspace_unigram() -> Tokenizer:
    """SentencePiece Unigram with the Metaspace pre-tokenizer and decoder."""
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok.decoder = decoders.Metaspace(prepend_scheme="first")
    trainer = trainers.UnigramTrainer(
        vocab_size=500, special_tokens=["<unk>", *SPECIALS], unk_token="<unk>", show_progress=False
    )
    tok.train_from_iterator(_corpus()[:600], trainer)
    return tok


class StreamingDecoder(Protocol):
    """What the streaming-decode tests drive (both detokenizers)."""

    def push(self, token_ids: Sequence[int]) -> str: ...

    def finish(self) -> str: ...


def stream(detok: StreamingDecoder, ids: list[int], cuts: list[int]) -> list[str]:
    """The deltas of ``ids`` pushed in chunks cut at ``cuts`` (taken modulo), then the finish."""
    bounds = sorted({0, len(ids), *(cut % (len(ids) + 1) for cut in cuts)})
    deltas = [detok.push(ids[a:b]) for a, b in itertools.pairwise(bounds)]
    return [*deltas, detok.finish()]


def assert_never_half_a_character(detok: StreamingDecoder, ids: list[int], full: str) -> None:
    """Pushed one token at a time, the text shown so far is always a prefix of ``full`` (the
    one-shot decode) with no U+FFFD that ``full`` lacks, and the finish completes it."""
    shown = ""
    for token_id in ids:
        shown += detok.push([token_id])
        assert full.startswith(shown)
        if "\ufffd" not in full:
            assert "\ufffd" not in shown
    assert shown + detok.finish() == full
