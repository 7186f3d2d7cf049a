"""Incremental detokenization: turn streamed token-id chunks into text deltas.

The deltas of one output, concatenated (plus :meth:`IncrementalDetokenizer.finish`), equal
decoding all its ids at once. Works for byte-level BPE and SentencePiece/Metaspace tokenizers:

* A window of ids is decoded per chunk; the text of its already released part
  (``ids[:_read]``, the previous chunk) is known, so the new text is the rest.
  Decoding with a little left context keeps tokenizer-specific spacing (a Metaspace decoder
  drops the leading space of the first token only) right.
* Trailing U+FFFD characters are held back: they may be the first bytes of a character whose
  remaining bytes are in the next chunk. Text before them is released at once. ``finish()``
  releases whatever is still held, exactly as the one-shot decode shows it.

Cost: two ``Tokenizer.decode`` calls (Rust) per chunk over the chunk plus the previous one;
no Python work per token.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

_REPLACEMENT = "\ufffd"


class IncrementalDetokenizer:
    """Per-output streaming decoder (create one per choice; not thread-safe).

    ``spaces_between_special_tokens`` is accepted for API parity with SGLang's sampling
    parameters; like Hugging Face's fast tokenizers, spacing around special tokens is decided by
    the tokenizer's own decoder, so it has no effect.
    """

    __slots__ = (
        "_emitted",
        "_ids",
        "_prefix_chars",
        "_read",
        "_tokenizer",
        "skip_special_tokens",
        "spaces_between_special_tokens",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        skip_special_tokens: bool = True,
        spaces_between_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self._ids: list[int] = []  # the current window only; earlier ids are dropped
        self._read = 0  # ids before this index (the left context) are fully released
        self._prefix_chars = 0  # len(decode(ids[:_read]))
        self._emitted = 0  # chars released beyond _prefix_chars from ids[_read:]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)

    def push(self, token_ids: Sequence[int]) -> str:
        """Add the next chunk of generated ids; return the text they complete (may be ``""``)."""
        if not token_ids:
            return ""
        self._ids.extend(token_ids)
        text = self._decode(self._ids)
        end = len(text)
        while end > self._prefix_chars and text[end - 1] == _REPLACEMENT:
            end -= 1
        start = self._prefix_chars + self._emitted
        delta = text[start:end] if end > start else ""
        if end == len(text):
            self._commit(len(text))
        else:
            self._emitted += len(delta)
        return delta

    def _commit(self, window_chars: int) -> None:
        """All ids decode cleanly: the ids not yet committed become the next window."""
        tail_chars = len(self._decode(self._ids[self._read :]))
        if tail_chars:
            del self._ids[: self._read]
            self._prefix_chars = tail_chars
        else:
            # The new ids show no text alone (skipped special tokens, a Metaspace "▁"): keep the
            # older context, or a decoder would treat the next token as the first one and strip
            # its leading space.
            self._prefix_chars = window_chars
        self._read = len(self._ids)
        self._emitted = 0

    def finish(self) -> str:
        """Release text still held back (an incomplete character shows as U+FFFD, as in decode)."""
        if self._read == len(self._ids):
            return ""
        text = self._decode(self._ids)
        delta = text[self._prefix_chars + self._emitted :]
        del self._ids[:]
        self._read = self._prefix_chars = self._emitted = 0
        return delta
