"""Stop strings and stop regexes over streamed text, and the visibility of a stop token's text.

:class:`StopStringMatcher` releases text as soon as it can no longer be part of a stop. The
output ends at the first stop to be *completed* reading left to right — the place an engine
checking its output after every token would stop — ties going to the longest stop. The matched
stop is cut off, or kept when ``keep_matched`` (SGLang's ``no_stop_trim``) is set.

Stop regexes (SGLang's ``stop_regex``) follow the same rules: the output ends where the text
first contains a match, and text that could still be the start of a match (a partial match, as
the ``regex`` package finds it) is held back — at most :data:`REGEX_HOLD_CHARS` characters, so
a pattern such as ``a.*b`` cannot hold the whole output. A pattern is searched in the text not
yet released; assertions about what follows a match (``$``, ``\\b``, lookahead) see the text
received so far.

Each chunk is searched once together with the held-back tail (shorter than the longest stop),
so the total work is linear in the output length.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import regex

#: The most text a stop regex's partial match holds back (a longer match is still found when
#: it arrives within one chunk of the held text).
REGEX_HOLD_CHARS = 256

#: Seconds one search of a stop regex may take (a pathological pattern must not stall the
#: event loop); beyond it :class:`StopRegexTimeout` is raised.
REGEX_TIMEOUT_S = 0.1


class StopRegexTimeout(ValueError):
    """A stop regex took too long to search the output."""


#: A stop found in a text: ``(start, end, confirmed, stop)``. ``end`` is where the match ends,
#: ``confirmed`` how much text was needed to know it matched (past ``end`` after a lookahead).
Hit = tuple[int, int, int, str]


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
    pattern: regex.Pattern[str], text: str, end: int | None = None, partial: bool = False
) -> regex.Match[str] | None:
    try:
        return pattern.search(text, 0, end, partial=partial, timeout=REGEX_TIMEOUT_S)
    except TimeoutError:
        raise StopRegexTimeout(f"stop regex {pattern.pattern!r} took too long") from None


def find_stop_regex(text: str, patterns: Iterable[regex.Pattern[str]]) -> Hit | None:
    """The regex match completed first in ``text``: the shortest prefix of ``text`` that holds
    a match (found by bisection), and that match."""
    best: Hit | None = None
    for pattern in patterns:
        found = _search(pattern, text)
        if found is None:
            continue
        low, high = 1, max(found.end(), 1)
        while low < high:  # smallest prefix length that still holds a match
            mid = (low + high) // 2
            if _search(pattern, text, mid) is None:
                low = mid + 1
            else:
                high = mid
        match = _search(pattern, text, high) or found
        hit = (match.start(), match.end(), max(high, match.end()), pattern.pattern)
        if best is None or (hit[2], hit[0]) < (best[2], best[0]):
            best = hit
    return best


def _regex_hold(text: str, patterns: Iterable[regex.Pattern[str]]) -> int:
    """Length of the tail of ``text`` that could start a regex match (capped)."""
    start = len(text)
    for pattern in patterns:
        partial = _search(pattern, text, partial=True)
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

    __slots__ = ("_held", "_patterns", "_stops", "keep_matched", "matched", "overshoot")

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
        hit = self._first_hit(window)
        if hit is not None:
            start, end, confirmed, stop = hit
            self.matched = stop
            self.overshoot = len(window) - confirmed
            self._held = ""
            return window[: end if self.keep_matched else start], stop
        hold = _held_suffix(window, self._stops) if self._stops else 0
        if self._patterns:
            hold = max(hold, _regex_hold(window, self._patterns))
        self._held = window[len(window) - hold :] if hold else ""
        return window[: len(window) - hold], None

    def _first_hit(self, window: str) -> Hit | None:
        hit: Hit | None = None
        if self._stops:
            found = find_stop(window, self._stops)
            if found is not None:
                start, end, stop = found
                hit = (start, end, end, stop)
        if self._patterns:
            found_regex = find_stop_regex(window, self._patterns)
            if found_regex is not None and (
                hit is None or (found_regex[2], found_regex[0]) < (hit[2], hit[0])
            ):
                hit = found_regex
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
