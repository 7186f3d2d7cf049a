"""Prompt encoding with a cache of the text between added tokens.

``tokenizers`` first cuts the text at added tokens (``<|im_start|>``, ``<|im_end|>``, …) and then
tokenizes each piece on its own, so the ids of a prompt are the ids of its pieces, joined. Chat
prompts repeat most pieces from request to request (system prompts, earlier turns of a
conversation, tool definitions), so each piece is encoded once and kept in a bounded LRU cache.
Only added tokens that match exactly (no ``lstrip``/``rstrip``/``single_word``) are used as cut
points; anything else stays inside a piece and is handled by the tokenizer itself.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator

from tokenizers import Tokenizer

from turnout.tokenizer.errors import TooManyTokens

#: What a cached piece counts against the cache's size at least (in characters): its entry
#: costs memory beyond its text, so that many short pieces cannot outgrow the bound.
_MIN_CHARGE = 64


class SegmentCache:
    """Encodes text without special-token post-processing, caching pieces between added tokens."""

    def __init__(self, backend: Tokenizer, max_chars: int = 8 * 1024 * 1024) -> None:
        self._backend = backend
        exact = {
            token.content: token_id
            for token_id, token in backend.get_added_tokens_decoder().items()
            if token.content and not (token.lstrip or token.rstrip or token.single_word)
        }
        self._ids = exact
        # Leftmost-longest, as the tokenizer's own added-token matcher.
        alternatives = sorted(exact, key=len, reverse=True)
        # One group: ``split`` returns the text between tokens at even and the tokens at odd
        # positions.
        self._splitter = (
            re.compile("(" + "|".join(re.escape(a) for a in alternatives) + ")") if exact else None
        )
        self._pieces: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._chars = 0
        self._max_chars = max_chars
        self._lock = threading.Lock()
        if self._splitter is not None and not self._agrees(alternatives):
            # e.g. a Metaspace pre-tokenizer that marks only the very first piece: pieces are
            # then not independent, and the cache stays off for this tokenizer.
            self._splitter = None

    def _agrees(self, tokens: list[str]) -> bool:
        """Check piecewise encoding against the tokenizer on probes around each cut token."""
        probes = ["plain text only", " leading space", "x\n\n  y"]
        for token in tokens[:32]:
            probes += [
                f"{token}user\nHello, world! How are you?{token}\n",
                f"  indented text before {token} and after it {token}",
                f"{token}{token} two in a row\n\n{token}",
                f"no space{token}word {token} word\t{token}\nline",
            ]
        return all(
            self.encode(probe) == self._backend.encode(probe, add_special_tokens=False).ids
            for probe in probes
        )

    def encode(self, text: str) -> list[int]:
        """The ids ``backend.encode(text, add_special_tokens=False)`` gives."""
        if self._splitter is None:
            return self._backend.encode(text, add_special_tokens=False).ids
        token_ids = self._ids
        ids: list[int] = []
        for i, part in enumerate(self._splitter.split(text)):
            if i % 2:
                ids.append(token_ids[part])
            elif part:
                ids.extend(self._piece(part))
        return ids

    def encode_long(self, text: str, max_tokens: int | None = None) -> list[int]:
        """:meth:`encode` for long texts, meant for a worker thread: the pieces not in the cache
        are encoded in one batch, which releases the GIL and runs in parallel. With
        ``max_tokens``, a text with more tokens raises :class:`TooManyTokens` before its ids
        are built (building them holds the GIL)."""
        parts: list[int | str | tuple[int, ...]] = (
            [text] if self._splitter is None else list(self._parts(text))
        )
        missing: list[str] = []
        for i, part in enumerate(parts):
            if isinstance(part, str):
                cached = self._cached(part)
                if cached is None:
                    missing.append(part)
                else:
                    parts[i] = cached
        encoded = self._backend.encode_batch_fast(missing, add_special_tokens=False)
        count = sum(1 if isinstance(p, int) else len(p) for p in parts if not isinstance(p, str))
        count += sum(len(encoding) for encoding in encoded)
        if max_tokens is not None and count > max_tokens:
            raise TooManyTokens(count, max_tokens, at_least=False)
        fresh = iter(encoded)
        ids: list[int] = []
        for part in parts:
            if isinstance(part, int):
                ids.append(part)
            elif isinstance(part, str):
                piece_ids = next(fresh).ids
                self._store(part, tuple(piece_ids))
                ids.extend(piece_ids)
            else:
                ids.extend(part)
        return ids

    def _parts(self, text: str) -> Iterator[int | str]:
        """The text between added tokens (strings) and the added tokens' ids, in order."""
        assert self._splitter is not None
        for i, part in enumerate(self._splitter.split(text)):
            if i % 2:
                yield self._ids[part]
            elif part:
                yield part

    def _piece(self, piece: str) -> tuple[int, ...]:
        cached = self._cached(piece)
        if cached is not None:
            return cached
        ids = tuple(self._backend.encode(piece, add_special_tokens=False).ids)
        self._store(piece, ids)
        return ids

    def _cached(self, piece: str) -> tuple[int, ...] | None:
        with self._lock:
            cached = self._pieces.get(piece)
            if cached is not None:
                self._pieces.move_to_end(piece)
            return cached

    def _store(self, piece: str, ids: tuple[int, ...]) -> None:
        # A piece larger than an eighth of the cache would only flush everything else.
        if len(piece) > self._max_chars // 8:
            return
        with self._lock:
            if piece not in self._pieces:
                self._pieces[piece] = ids
                self._chars += max(len(piece), _MIN_CHARGE)
                while self._chars > self._max_chars and self._pieces:
                    old, _ = self._pieces.popitem(last=False)
                    self._chars -= max(len(old), _MIN_CHARGE)
