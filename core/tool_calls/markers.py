"""Marker detection for streamed text: hold back only what could still become a marker."""

from __future__ import annotations

from collections.abc import Iterable


def partial_marker_suffix(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of ``markers``.

    Streaming parsers release ``text[:len(text) - n]`` at once and hold back the last ``n``
    characters until the next delta decides whether they start a marker.
    """
    best = 0
    for marker in markers:
        # Only suffixes shorter than the marker can be proper prefixes of it.
        limit = min(len(marker) - 1, len(text))
        for size in range(limit, best, -1):
            if marker.startswith(text[len(text) - size :]):
                best = size
                break
    return best


def find_first_marker(text: str, markers: Iterable[str], start: int = 0) -> tuple[int, str] | None:
    """Position and value of the earliest complete marker in ``text[start:]`` (longest on ties)."""
    found: tuple[int, str] | None = None
    for marker in markers:
        pos = text.find(marker, start)
        if pos < 0:
            continue
        if found is None or pos < found[0] or (pos == found[0] and len(marker) > len(found[1])):
            found = (pos, marker)
    return found


class MarkerScanner:
    """Split streamed text at the first occurrence of any start marker.

    ``feed`` returns ``(released_text, marker)``: text that is certainly not part of a marker,
    and the marker once it is complete (``None`` before). After a marker is found the scanner
    stops scanning; what followed the marker is available as :attr:`rest`.
    """

    __slots__ = ("_buffer", "_markers", "marker", "rest")

    def __init__(self, markers: Iterable[str]) -> None:
        self._markers = tuple(markers)
        self._buffer = ""
        self.marker: str | None = None
        self.rest = ""

    def feed(self, delta: str) -> tuple[str, str | None]:
        """Consume ``delta``; return released text and the marker if it just completed."""
        if self.marker is not None:
            self.rest += delta
            return "", None
        text = self._buffer + delta
        hit = find_first_marker(text, self._markers)
        if hit is not None:
            pos, marker = hit
            self.marker = marker
            self.rest = text[pos + len(marker) :]
            self._buffer = ""
            return text[:pos], marker
        keep = partial_marker_suffix(text, self._markers)
        self._buffer = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], None

    def flush(self) -> str:
        """End of input: everything held back turned out not to be a marker."""
        held, self._buffer = self._buffer, ""
        return held
