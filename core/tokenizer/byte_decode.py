"""Decoding byte-level BPE output in Python: the tokens' bytes joined, then UTF-8.

A byte-level vocabulary (GPT-2's alphabet: Qwen, Llama 3, DeepSeek…) spells every token as its
bytes, and its decoder only joins them and decodes the result as UTF-8 (invalid sequences as
U+FFFD). Joining bytes from a table and decoding them in Python does the same several times
faster than ``Tokenizer.decode``, whose per-call and per-token overhead dominates for the few
hundred tokens of an answer.

:func:`byte_decoder` gives such a decoder only for a tokenizer whose decoder is exactly
``ByteLevel``, whose every token has bytes in the alphabet (added tokens: their content), and
which agrees with ``Tokenizer.decode`` on probes (every added token, random id sequences, with
and without special tokens); otherwise ``None``, and the tokenizer's own decode is used.
"""

from __future__ import annotations

import codecs
import json
import random
from collections.abc import Sequence
from operator import itemgetter

from tokenizers import Tokenizer

from turnout.tokenizer.token_bytes import byte_level_bytes

_utf8_decode = codecs.utf_8_decode
#: Random id sequences checked against the tokenizer (each with and without special tokens).
_PROBES = 64
_PROBE_LENGTH = 48


def _joined(table: list[bytes], ids: Sequence[int]) -> bytes:
    """The bytes of ``ids`` spelled by ``table`` (``IndexError`` for an id beyond it)."""
    if len(ids) > 1:
        return b"".join(itemgetter(*ids)(table))
    return table[ids[0]] if ids else b""


class ByteDecoder:
    """``decode(ids, skip_special_tokens)`` of one byte-level tokenizer (see the module)."""

    __slots__ = ("_backend", "_skipping", "_table")

    def __init__(self, backend: Tokenizer, table: list[bytes], special: frozenset[int]) -> None:
        self._backend = backend
        self._table = table
        #: The table with the special tokens spelled as nothing: skipping them is then only
        #: another lookup, not a test per token.
        self._skipping = [b"" if i in special else raw for i, raw in enumerate(table)]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` (token ids: not negative), as ``Tokenizer.decode`` gives it."""
        table = self._skipping if skip_special_tokens else self._table
        try:
            data = _joined(table, ids)
        except IndexError:  # an id beyond the vocabulary: the tokenizer's decode skips it
            return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return data.decode("utf-8", "replace")

    def stream(
        self, skip_special_tokens: bool = True, spaces_between_special_tokens: bool = True
    ) -> ByteLevelDetokenizer:
        """A streaming decoder of one output (see :class:`ByteLevelDetokenizer`)."""
        table = self._skipping if skip_special_tokens else self._table
        return ByteLevelDetokenizer(table, skip_special_tokens, spaces_between_special_tokens)


class ByteLevelDetokenizer:
    """Streaming decoder of one output of a byte-level vocabulary: the bytes of each chunk's
    tokens go through one incremental UTF-8 decoder, which holds an incomplete character until
    its last byte comes and replaces invalid bytes as the one-shot decode does. So the deltas
    add up to ``ByteDecoder.decode`` of all the ids (``finish()`` included), each chunk is
    decoded once, and no window of earlier ids is kept.

    The interface of :class:`~turnout.tokenizer.detokenizer.IncrementalDetokenizer`
    (``spaces_between_special_tokens`` has no effect either).
    """

    __slots__ = ("_held", "_table", "skip_special_tokens", "spaces_between_special_tokens")

    def __init__(
        self, table: list[bytes], skip_special_tokens: bool, spaces_between_special_tokens: bool
    ) -> None:
        self._table = table
        #: The bytes of an incomplete character at the end (what ``codecs``' incremental
        #: decoder keeps; decoding here directly saves a Python call per chunk).
        self._held = b""
        self.skip_special_tokens = skip_special_tokens
        self.spaces_between_special_tokens = spaces_between_special_tokens

    def push(self, token_ids: Sequence[int]) -> str:
        """Add the next chunk of generated ids; return the text they complete (may be ``""``)."""
        table = self._table
        try:  # _joined, inline: one call fewer per chunk
            if len(token_ids) > 1:
                data = b"".join(itemgetter(*token_ids)(table))
            else:
                data = table[token_ids[0]] if token_ids else b""
        except IndexError:  # ids beyond the vocabulary show nothing, as in the one-shot decode
            size = len(table)
            data = b"".join([table[i] for i in token_ids if i < size])
        if self._held:
            data = self._held + data
        elif data[-1:] < b"\x80":
            # Ends in ASCII (or is empty): no character is left incomplete, and bytes.decode
            # gives what the incremental decode would, for less than codecs' call.
            return data.decode("utf-8", "replace")
        text, used = _utf8_decode(data, "replace", False)
        self._held = data[used:]
        return text

    def finish(self) -> str:
        """Release what is still held (an incomplete character shows as U+FFFD, as in decode)."""
        text, _ = _utf8_decode(self._held, "replace", True)
        self._held = b""
        return text

    def fork(self) -> ByteLevelDetokenizer:
        """An independent copy in the same state (to replay ids without changing this one)."""
        twin = ByteLevelDetokenizer(
            self._table, self.skip_special_tokens, self.spaces_between_special_tokens
        )
        twin._held = self._held
        return twin


def byte_decoder(backend: Tokenizer) -> ByteDecoder | None:
    """A :class:`ByteDecoder` for ``backend``, or ``None`` when it cannot be exact."""
    decoder = backend.decoder
    if decoder is None:
        return None
    try:
        if json.loads(decoder.__getstate__()).get("type") != "ByteLevel":
            return None
    except Exception:  # a custom (Python) decoder has no serialisable state
        return None
    size = backend.get_vocab_size(with_added_tokens=True)
    added = backend.get_added_tokens_decoder()
    table: list[bytes] = []
    for token_id in range(size):
        token = added.get(token_id)
        if token is not None:
            table.append(token.content.encode("utf-8"))
            continue
        spelled = backend.id_to_token(token_id)
        raw = None if spelled is None else byte_level_bytes(spelled)
        if raw is None:
            return None  # a hole in the ids, or a token outside the alphabet
        table.append(raw)
    special = frozenset(token_id for token_id, token in added.items() if token.special)
    fast = ByteDecoder(backend, table, special)
    return fast if _agrees(backend, fast, sorted(added), size) else None


def _agrees(backend: Tokenizer, fast: ByteDecoder, added: list[int], size: int) -> bool:
    rng = random.Random(size)  # the same probes for the same tokenizer
    probes = [[token_id] for token_id in added]
    probes += [[rng.randrange(size) for _ in range(_PROBE_LENGTH)] for _ in range(_PROBES)]
    if added:  # added tokens among regular ones (and between the bytes of one character)
        probes += [
            [rng.choice(added) if rng.random() < 0.2 else rng.randrange(size) for _ in range(24)]
            for _ in range(_PROBES)
        ]
    return all(
        fast.decode(ids, skip) == backend.decode(ids, skip_special_tokens=skip)
        for ids in probes
        for skip in (False, True)
    )
