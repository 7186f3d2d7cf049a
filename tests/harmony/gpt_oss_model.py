"""A gpt-oss model directory without weights, for the simulator and the router: its
``tokenizer.json`` is a byte-level BPE over the very vocabulary openai-harmony uses (o200k_base
plus the harmony special tokens, at their ids), built offline from the ``o200k_base.tiktoken``
file turnout's harmony plugin provides. Whatever the simulator encodes, harmony decodes to the
same text, and the harmony markup in a scripted reply becomes its special tokens."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from turnout.plugins.harmony import load_gpt_oss_encoding, o200k_vocab_dir
from turnout.plugins.harmony.vocab import O200K_FILE

#: <|return|>, <|endoftext|>, <|call|>: where gpt-oss stops (its generation_config.json).
EOS_IDS = [200002, 199999, 200012]


def _byte_chars() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte (byte-level BPE vocabularies are written so)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def _bpe(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[str]]:
    """Vocabulary and merges: each multi-byte token is merged from its first split into two
    tokens of lower rank (any such split decodes to the same bytes)."""
    chars = _byte_chars()

    def text(token: bytes) -> str:
        return "".join(chars[b] for b in token)

    vocab = {text(token): rank for token, rank in ranks.items()}
    merges: list[tuple[int, str]] = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            left, right = ranks.get(token[:i]), ranks.get(token[i:])
            if left is not None and right is not None and left < rank and right < rank:
                merges.append((rank, f"{text(token[:i])} {text(token[i:])}"))
                break
    merges.sort()
    return vocab, [merge for _, merge in merges]


def write_gpt_oss_model(directory: Path, vocab_dir: Path) -> Path:
    """Write the model directory (about 3 s); ``vocab_dir`` is where the vocabulary is cached."""
    ranks: dict[bytes, int] = {}
    for line in (o200k_vocab_dir(vocab_dir) / O200K_FILE).read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    vocab, merges = _bpe(ranks)
    encoding = load_gpt_oss_encoding(vocab_dir)
    specials = sorted(
        (encoding.encode(name, allowed_special="all")[0], name)
        for name in encoding.special_tokens_set
    )
    byte_level: dict[str, Any] = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": True,
    }
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": token_id,
                "content": name,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for token_id, name in specials
        ],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": None,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": True,
            "vocab": vocab,
            "merges": merges,
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        "tokenizer.json": tokenizer,
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": "<|return|>",
            "pad_token": "<|endoftext|>",
            "model_max_length": 131072,
        },
        "config.json": {
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "max_position_embeddings": 131072,
            "eos_token_id": EOS_IDS[0],
        },
        "generation_config.json": {"eos_token_id": EOS_IDS},
    }
    for name, data in files.items():
        (directory / name).write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return directory
