"""Stop strings and stop regexes over streamed text, and the visibility of a stop token's text.

:class:`StopStringMatcher` releases text as soon as it can no longer be part of a stop. The
output ends at the first stop to be *completed* reading left to right — the place an engine
checking its output after every token would stop — ties going to the longest stop. The matched
stop is cut off, or kept when ``keep_matched`` (SGLang's ``no_stop_trim``) is set.

Stop regexes (SGLang's ``stop_regex``) follow the same rules: the output ends after the
shortest prefix of the text that holds a match, and text that could still be the start of a
match (a partial match, as the ``regex`` package finds it) is held back — at most
:data:`REGEX_HOLD_CHARS` characters, so a pattern such as ``a.*b`` cannot hold the whole output.
Matches start in the text not yet released; lookbehinds, ``^`` and ``\\b`` also see up to
:data:`REGEX_HOLD_CHARS` characters of released text before it. How the text is cut into chunks
changes none of this: a lookahead's match ends where it does but counts as completed where its
lookahead was satisfied, and a pattern whose match can depend on what follows it (``$``,
``\\b``, a negative lookahead, ...) is checked at every character of new text.

Each chunk is searched once together with the held-back tail (shorter than the longest stop,
or :data:`REGEX_HOLD_CHARS`), so the total work is linear in the output length (a stop regex
that can depend on what follows its match: once per new character).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Sequence

import regex

#: The most text a stop regex's partial match holds back (a longer match is still found when
#: it arrives within one chunk of the held text), and the most released text its lookbehinds see.
REGEX_HOLD_CHARS = 256

#: Syntax with which whether a text holds a match can change when more text follows (end
#: anchors, word boundaries, negative lookahead, atomic groups, possessive quantifiers,
#: conditionals): such a pattern cannot be bisected, it is tried at every new character. The
#: test is on the pattern's text, so it errs towards false alarms (an escaped ``\\$``), which
#: only cost time.
_END_SENSITIVE = regex.compile(r"\$|\\[ZzbBmMG]|\(\?!|\(\?>|\(\?\(|[*+?}]\+")

#: Seconds one search of a stop regex may take (a pathological pattern must not stall the
#: event loop); beyond it :class:`StopRegexTimeout` is raised.
REGEX_TIMEOUT_S = 0.1


class StopRegexTimeout(ValueError):
    """A stop regex took too long to search the output."""


#: A stop found in a text: ``(start, end, confirmed, stop)``. ``end`` is where the match ends,
#: ``confirmed`` how much text was needed to know it matched (past ``end`` after a lookahead).
Hit = tuple[int, int, int, str]


def _first(hit: Hit | None, other: Hit | None) -> Hit | None:
    """The stop completed first (then the one starting first, then ending first); ``hit`` on a
    tie."""
    if other is None or (
        hit is not None and (hit[2], hit[0], hit[1]) <= (other[2], other[0], other[1])
    ):
        return hit
    return other


def _held_suffix(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop.

    Only positions holding a stop's first character are tried, nearest the start first.
    """
    best = len(text)
    for stop in stops:
        pos = text.find(stop[0], max(0, len(text) - len(stop) + 1), best)
        while pos >= 0:
            if stop.startswith(text[pos:]):
                best = pos
                break
            pos = text.find(stop[0], pos + 1, best)
    return len(text) - best


def find_stop(text: str, stops: Iterable[str]) -> tuple[int, int, str] | None:
    """``(start, end, stop)`` of the stop completed first in ``text`` (longest on ties)."""
    best: tuple[int, int, str] | None = None
    for stop in stops:
        start = text.find(stop)
        if start < 0:
            continue
        end = start + len(stop)
        if best is None or end < best[1] or (end == best[1] and start < best[0]):
            best = (start, end, stop)
    return best


def compile_stop_regexes(patterns: Iterable[str]) -> list[regex.Pattern[str]]:
    """Compile stop regexes; ``ValueError`` names a pattern that is invalid or matches the
    empty string (it would end every output at once)."""
    compiled = []
    for pattern in dict.fromkeys(patterns):
        try:
            regexp = regex.compile(pattern)
        except regex.error as exc:
            raise ValueError(f"invalid stop regex {pattern!r}: {exc}") from None
        if regexp.search("") is not None:
            raise ValueError(f"stop regex {pattern!r} matches the empty string")
        compiled.append(regexp)
    return compiled


def _search(
    pattern: regex.Pattern[str],
    text: str,
    pos: int = 0,
    end: int | None = None,
    partial: bool = False,
) -> regex.Match[str] | None:
    try:
        return pattern.search(text, pos, end, partial=partial, timeout=REGEX_TIMEOUT_S)
    except TimeoutError:
        raise StopRegexTimeout(f"stop regex {pattern.pattern!r} took too long") from None


@functools.lru_cache(maxsize=256)
def _end_sensitive(pattern: regex.Pattern[str]) -> bool:
    return _END_SENSITIVE.search(pattern.pattern) is not None


def find_stop_regex(
    text: str, patterns: Iterable[regex.Pattern[str]], pos: int = 0, new: int = 0
) -> Hit | None:
    """The regex match completed first in ``text``: the shortest prefix of ``text`` that holds a
    match starting at ``pos`` or later (``text[:pos]`` is context for lookbehinds), and that
    match. ``text[:new]`` is known to hold none."""
    best: Hit | None = None
    for pattern in patterns:
        low, high = max(new, pos) + 1, len(text)
        if _end_sensitive(pattern):
            # Starts at most REGEX_HOLD_CHARS back, as in a stream (a longer partial match
            # is released): each of these searches is bounded, however long the text.
            while low <= high and (
                _search(pattern, text, max(pos, low - REGEX_HOLD_CHARS), low) is None
            ):
                low += 1
            high = low
        elif _search(pattern, text, pos) is not None:
            # Holding a match is monotone in the prefix length here (a lookahead that held
            # goes on holding): bisect for the shortest prefix, the whole text being one.
            while low < high:
                mid = (low + high) // 2
                if _search(pattern, text, pos, mid) is None:
                    low = mid + 1
                else:
                    high = mid
        else:
            continue
        match = _search(pattern, text, pos, high) if high <= len(text) else None
        if match is not None:
            best = _first(best, (match.start(), match.end(), high, pattern.pattern))
    return best


def _regex_hold(text: str, patterns: Iterable[regex.Pattern[str]], pos: int = 0) -> int:
    """Length of the tail of ``text[pos:]`` that could start a regex match (capped)."""
    start = len(text)
    for pattern in patterns:
        partial = _search(pattern, text, pos, partial=True)
        if partial is not None and partial.partial:
            start = min(start, partial.start())
    return min(len(text) - start, REGEX_HOLD_CHARS)


def apply_stops(text: str, stops: Iterable[str], keep_matched: bool) -> tuple[str, str | None]:
    """One-shot version of :class:`StopStringMatcher`: the output text and the matched stop."""
    hit = find_stop(text, stops)
    if hit is None:
        return text, None
    start, end, stop = hit
    return text[: end if keep_matched else start], stop


class StopStringMatcher:
    """Streaming stop-string detection for one output choice (not thread-safe).

    ``push(text)`` returns ``(released_text, matched_stop)``; once a stop matched, the output
    is over: later pushes return ``("", None)``, :attr:`matched` holds the stop and
    :attr:`overshoot` says how much of the last text came after it. ``finish()`` releases text
    held back because it might have started a stop string.
    """

    __slots__ = (
        "_context",
        "_held",
        "_patterns",
        "_stops",
        "keep_matched",
        "matched",
        "overshoot",
    )

    def __init__(
        self,
        stops: Iterable[str],
        keep_matched: bool = False,
        patterns: Sequence[regex.Pattern[str]] = (),
    ) -> None:
        """``stops``: the request's stop strings (must be non-empty strings); ``patterns``: its
        stop regexes (see :func:`compile_stop_regexes`). A matched regex is reported by its
        pattern text."""
        unique = tuple(dict.fromkeys(stops))
        for stop in unique:
            if not isinstance(stop, str) or not stop:
                raise ValueError(f"stop strings must be non-empty strings, got {stop!r}")
        self._stops = unique
        self._patterns = tuple(patterns)
        self._held = ""
        #: The end of the released text, which stop regexes' lookbehinds see.
        self._context = ""
        self.keep_matched = keep_matched
        self.matched: str | None = None
        #: Characters of the text pushed last that came after the end of the matched stop.
        self.overshoot = 0

    @property
    def done(self) -> bool:
        """Whether a stop string has matched (the output is complete)."""
        return self.matched is not None

    def push(self, text: str) -> tuple[str, str | None]:
        """Consume the next piece of output text; return what may be shown and any match."""
        if self.matched is not None:
            return "", None
        if not (self._stops or self._patterns):
            return text, None
        window = self._held + text
        context = len(self._context)
        searched = self._context + window if self._patterns else window
        hit = self._first_hit(window, searched, context, len(self._held))
        if hit is not None:
            start, end, confirmed, stop = hit
            self.matched = stop
            self.overshoot = len(window) - confirmed
            self._held = ""
            return window[: end if self.keep_matched else start], stop
        hold = _held_suffix(window, self._stops) if self._stops else 0
        if self._patterns:
            hold = max(hold, _regex_hold(searched, self._patterns, context))
        released = window[: len(window) - hold]
        self._held = window[len(released) :]
        if self._patterns and released:
            self._context = (self._context + released)[-REGEX_HOLD_CHARS:]
        return released, None

    def _first_hit(self, window: str, searched: str, context: int, new: int) -> Hit | None:
        """The stop completed first in ``window``, whose first ``new`` characters (the held
        text) hold none; ``searched`` is ``window`` after ``context`` characters of released
        text, for the stop regexes."""
        hit: Hit | None = None
        if self._stops:
            found = find_stop(window, self._stops)
            if found is not None:
                start, end, stop = found
                hit = (start, end, end, stop)
        if self._patterns:
            found_regex = find_stop_regex(searched, self._patterns, context, context + new)
            if found_regex is not None:
                start, end, confirmed, pattern = found_regex
                hit = _first(hit, (start - context, end - context, confirmed - context, pattern))
        return hit

    def finish(self) -> str:
        """Release the held-back tail at the end of the output (no stop matched)."""
        held, self._held = self._held, ""
        return held


def stop_token_visible(
    token_id: int,
    *,
    no_stop_trim: bool,
    skip_special_tokens: bool,
    special_token_ids: Collection[int],
) -> bool:
    """Whether the text of the token that ended generation (EOS, ``stop_token_ids``) is shown.

    It is trimmed unless ``no_stop_trim``; even then a special token stays hidden under
    ``skip_special_tokens``.
    """
    if not no_stop_trim:
        return False
    return not (skip_special_tokens and token_id in special_token_ids)


def ids_to_show(
    output_ids: Sequence[int],
    matched_token_id: int | None,
    *,
    no_stop_trim: bool,
    skip_special_tokens: bool,
    special_token_ids: Collection[int],
) -> Sequence[int]:
    """``output_ids`` without a final stop token whose text must not be shown."""
    if (
        matched_token_id is None
        or not output_ids
        or output_ids[-1] != matched_token_id
        or stop_token_visible(
            matched_token_id,
            no_stop_trim=no_stop_trim,
            skip_special_tokens=skip_special_tokens,
            special_token_ids=special_token_ids,
        )
    ):
        return output_ids
    return output_ids[:-1]
