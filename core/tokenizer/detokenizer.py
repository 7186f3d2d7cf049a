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
* Byte-fallback tokens (``<0x0A>``, SentencePiece) are decoded as a run: when the run is not
  valid UTF-8, *every* byte of it shows as U+FFFD, even an ASCII one decoded cleanly before. So
  the text of a trailing run of byte tokens is held until a regular token ends the run. With
  ``skip_special_tokens`` the special tokens inside a run vanish before decoding, so they do
  not end it.

Cost: two decodes per chunk over the chunk plus the previous one (one for the first chunk, so
a one-shot answer's output is decoded once) with ``Tokenizer.decode`` (Rust). A byte-level
vocabulary needs no window: its models stream through
:class:`~turnout.tokenizer.byte_decode.ByteLevelDetokenizer`, one incremental UTF-8 decode per
chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer

_REPLACEMENT = "\ufffd"


def byte_fallback_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """Ids of the ``<0x00>``…``<0xFF>`` byte tokens of ``tokenizer`` (empty for byte-level BPE)."""
    ids = (tokenizer.token_to_id(f"<0x{byte:02X}>") for byte in range(256))
    return frozenset(token_id for token_id in ids if token_id is not None)


def special_ids(tokenizer: Tokenizer) -> frozenset[int]:
    """Ids of ``tokenizer``'s special added tokens (those ``skip_special_tokens`` drops)."""
    added = tokenizer.get_added_tokens_decoder()
    return frozenset(token_id for token_id, token in added.items() if token.special)


class IncrementalDetokenizer:
    """Per-output streaming decoder (create one per choice; not thread-safe).

    ``spaces_between_special_tokens`` is accepted for API parity with SGLang's sampling
    parameters; like Hugging Face's fast tokenizers, spacing around special tokens is decided by
    the tokenizer's own decoder, so it has no effect.
    """

    __slots__ = (
        "_byte_ids",
        "_emitted",
        "_ids",
        "_prefix_chars",
        "_read",
        "_run_ids",
        "_skipped",
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
        byte_ids: frozenset[int] | None = None,
        special: frozenset[int] | None = None,
    ) -> None:
        """``byte_ids``: the tokenizer's :func:`byte_fallback_ids`; ``special``: its
        :func:`special_ids` (each computed when not given, and only when needed)."""
        self._tokenizer = tokenizer
        self._byte_ids = byte_fallback_ids(tokenizer) if byte_ids is None else byte_ids
        #: Ids that vanish from the decode and so do not end a run of byte tokens.
        self._skipped: frozenset[int] = frozenset()
        if self._byte_ids and skip_special_tokens:
            self._skipped = special_ids(tokenizer) if special is None else special
        #: What a trailing run of byte tokens is made of (skipped specials vanish inside it).
        self._run_ids = self._byte_ids | self._skipped if self._skipped else self._byte_ids
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens
        self._ids: list[int] = []  # the current window only; earlier ids are dropped
        self._read = 0  # ids before this index (the left context) are fully released
        self._prefix_chars = 0  # len(decode(ids[:_read]))
        self._emitted = 0  # chars released beyond _prefix_chars from ids[_read:]

    def _decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, self.skip_special_tokens)

    def push(self, token_ids: Sequence[int]) -> str:
        """Add the next chunk of generated ids; return the text they complete (may be ``""``)."""
        if not token_ids:
            return ""
        self._ids.extend(token_ids)
        text = self._decode(self._ids)
        end = len(text)
        if self._byte_ids and self._ends_in_byte_run():
            end = self._chars_before_byte_run()
        while end > self._prefix_chars and text[end - 1] == _REPLACEMENT:
            end -= 1
        start = self._prefix_chars + self._emitted
        delta = text[start:end] if end > start else ""
        if end == len(text):
            self._commit(len(text))
        else:
            self._emitted += len(delta)
        return delta

    def _ends_in_byte_run(self) -> bool:
        """Whether the window's last id that shows in the decode is a byte token."""
        ids, skipped = self._ids, self._skipped
        at = len(ids) - 1
        while at >= self._read and ids[at] in skipped:
            at -= 1
        return at >= self._read and ids[at] in self._byte_ids

    def _chars_before_byte_run(self) -> int:
        """Length of the window's text without its trailing run of byte tokens (and the
        skipped special tokens among them)."""
        ids, run = self._ids, self._run_ids
        start = len(ids) - 1
        while start > self._read and ids[start - 1] in run:
            start -= 1
        if start == self._read:
            return self._prefix_chars
        return len(self._decode(self._ids[:start]))

    def _commit(self, window_chars: int) -> None:
        """All ids decode cleanly: the ids not yet committed become the next window."""
        # Without left context the tail is the whole window, just decoded (a one-shot answer's
        # output is then decoded once).
        tail_chars = window_chars if self._read == 0 else len(self._decode(self._ids[self._read :]))
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

    def fork(self) -> IncrementalDetokenizer:
        """An independent copy in the same state (to replay ids without changing this one)."""
        twin = IncrementalDetokenizer.__new__(IncrementalDetokenizer)
        twin._tokenizer = self._tokenizer
        twin._byte_ids = self._byte_ids
        twin._skipped = self._skipped
        twin._run_ids = self._run_ids
        twin.skip_special_tokens = self.skip_special_tokens
        twin.spaces_between_special_tokens = self.spaces_between_special_tokens
        twin._ids = list(self._ids)
        twin._read = self._read
        twin._prefix_chars = self._prefix_chars
        twin._emitted = self._emitted
        return twin

    def finish(self) -> str:
        """Release text still held back (an incomplete character shows as U+FFFD, as in decode)."""
        if self._read == len(self._ids):
            return ""
        text = self._decode(self._ids)
        delta = text[self._prefix_chars + self._emitted :]
        del self._ids[:]
        self._read = self._prefix_chars = self._emitted = 0
        return delta
