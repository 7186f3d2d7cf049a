"""Text and raw bytes of single tokens, as logprobs report them.

Decoding one token alone is lossy: a byte-level BPE token holding part of a multi-byte character
decodes to U+FFFD. Its real bytes are in the vocabulary itself, in the form the tokenizer's
decoder undoes: GPT-2's byte-to-unicode alphabet (byte-level BPE), ``▁`` for a space and
``<0xAB>`` byte tokens (SentencePiece). How to read them is decided once per tokenizer; each
token's text and bytes are derived the first time a logprob names it, then reused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Literal

from tokenizers import Tokenizer

VocabularyKind = Literal["byte_level", "sentencepiece", "plain"]

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_SPACE = "\u2581"


def _byte_level_alphabet() -> dict[int, str]:
    """GPT-2's byte-level alphabet, reversed: code point of the vocabulary character → the
    byte it stands for (as a one-character latin-1 string, for ``str.translate``)."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + shifted)
            shifted += 1
    return {char: chr(byte) for byte, char in zip(printable, chars, strict=True)}


_BYTE_LEVEL = _byte_level_alphabet()


def byte_level_bytes(spelled: str) -> bytes | None:
    """The bytes a token spelled in GPT-2's byte-level alphabet stands for (``None`` when it
    is not spelled in that alphabet)."""
    try:
        return spelled.translate(_BYTE_LEVEL).encode("latin-1")
    except UnicodeEncodeError:
        return None


def vocabulary_kind(backend: Tokenizer) -> VocabularyKind:
    """How the vocabulary spells bytes, read from the tokenizer's decoder."""
    decoder = backend.decoder
    if decoder is None:
        return "plain"
    try:
        state = json.loads(decoder.__getstate__())
    except Exception:  # a custom (Python) decoder has no serialisable state
        return "plain"
    types = {state.get("type")} | {part.get("type") for part in state.get("decoders") or ()}
    if "ByteLevel" in types:
        return "byte_level"
    if types & {"ByteFallback", "Metaspace"}:
        return "sentencepiece"
    return "plain"


class TokenPieces:
    """Text and bytes of single tokens of one tokenizer (shared by every request).

    ``piece(token_id)`` gives the text a client sees for the token (``decode([id])``, which may
    hold U+FFFD) and its real bytes. Added tokens are their content in UTF-8. Each token is
    derived once; the cache holds at most one entry per vocabulary id.
    """

    __slots__ = ("_added", "_backend", "_cache", "kind")

    def __init__(self, backend: Tokenizer, added: Mapping[int, str]) -> None:
        """``added``: the added tokens' ids and contents."""
        self._backend = backend
        self._added = dict(added)
        self._cache: dict[int, tuple[str, bytes]] = {}
        self.kind = vocabulary_kind(backend)

    def piece(self, token_id: int) -> tuple[str, bytes]:
        """``(text, bytes)`` of one token."""
        cached = self._cache.get(token_id)
        if cached is None:
            cached = self._derive(token_id)
            self._cache[token_id] = cached
        return cached

    def _derive(self, token_id: int) -> tuple[str, bytes]:
        text = self._backend.decode([token_id], skip_special_tokens=False)
        return text, self._raw(token_id, text)

    def _raw(self, token_id: int, text: str) -> bytes:
        content = self._added.get(token_id)
        if content is not None:
            return content.encode("utf-8")
        spelled = self._backend.id_to_token(token_id)
        if spelled is None:
            return text.encode("utf-8")
        if self.kind == "byte_level":
            raw = byte_level_bytes(spelled)
            return text.encode("utf-8") if raw is None else raw
        if self.kind == "sentencepiece":
            byte = _BYTE_TOKEN.fullmatch(spelled)
            if byte is not None:
                return bytes([int(byte.group(1), 16)])
            return spelled.replace(_SPIECE_SPACE, " ").encode("utf-8")
        return text.encode("utf-8")
