"""Stop strings over streamed text, and the visibility of a stop token's text.

:class:`StopStringMatcher` releases text as soon as it can no longer be part of a stop string.
The output ends at the first stop string to be *completed* reading left to right — the place an
engine checking its output after every token would stop — ties going to the longest stop. The
matched stop is cut off, or kept when ``keep_matched`` (SGLang's ``no_stop_trim``) is set.

Each chunk is searched once together with the held-back tail (shorter than the longest stop),
so the total work is linear in the output length.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence


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
    is over: later pushes return ``("", None)`` and :attr:`matched` holds the stop. ``finish()``
    releases text held back because it might have started a stop string.
    """

    __slots__ = ("_held", "_stops", "keep_matched", "matched")

    def __init__(self, stops: Iterable[str], keep_matched: bool = False) -> None:
        """``stops``: the request's stop strings (must be non-empty strings)."""
        unique = tuple(dict.fromkeys(stops))
        for stop in unique:
            if not isinstance(stop, str) or not stop:
                raise ValueError(f"stop strings must be non-empty strings, got {stop!r}")
        self._stops = unique
        self._held = ""
        self.keep_matched = keep_matched
        self.matched: str | None = None

    @property
    def done(self) -> bool:
        """Whether a stop string has matched (the output is complete)."""
        return self.matched is not None

    def push(self, text: str) -> tuple[str, str | None]:
        """Consume the next piece of output text; return what may be shown and any match."""
        if self.matched is not None:
            return "", None
        if not self._stops:
            return text, None
        window = self._held + text
        hit = find_stop(window, self._stops)
        if hit is not None:
            start, end, stop = hit
            self.matched = stop
            self._held = ""
            return window[: end if self.keep_matched else start], stop
        hold = _held_suffix(window, self._stops)
        self._held = window[len(window) - hold :] if hold else ""
        return window[: len(window) - hold], None

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
