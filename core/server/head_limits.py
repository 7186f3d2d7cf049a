"""Bounds on a request's head (request line and header fields), counted as the HTTP parser reads
it, so that a client cannot make the server hold a header of any size or any number of them.

The parser (httptools) gathers a header field's name and value until the next field begins, and
only then hands the field over: a line that never ends would grow without bound. So besides each
whole line, :class:`HeadCount` counts the bytes fed while no field was handed over
(:meth:`HeadCount.fed`): the line in progress is at most that long.
"""

from __future__ import annotations

from dataclasses import dataclass

from turnout.errors import ApiError

__all__ = ["HeadCount", "HeadLimits", "HeadTooLarge"]


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """Bytes of one line (the request line, or a header field's line), bytes of the whole head,
    and header fields in it (0 disables each)."""

    line_bytes: int = 0
    total_bytes: int = 0
    count: int = 0


class HeadTooLarge(Exception):
    """A request head over its limits: the answer (414 or 431) and the reason."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.error = ApiError(status, message, code=code)


class HeadCount:
    """The size of the request head being read on one connection (see the module doc).

    The parser's callbacks report each piece (:meth:`begin`, :meth:`url`, :meth:`field`,
    :meth:`complete`); each raises :class:`HeadTooLarge` once a limit is passed.
    """

    __slots__ = ("_count", "_limits", "_partial", "_total", "_url", "events", "reading")

    def __init__(self, limits: HeadLimits) -> None:
        self._limits = limits
        #: Callbacks so far: :meth:`fed` tells from it whether a piece was handed over.
        self.events = 0
        #: True from a request's first byte until its head is complete.
        self.reading = False
        self._url = self._total = self._count = self._partial = 0

    def begin(self) -> None:
        """A new request starts."""
        self.events += 1
        self.reading = True
        self._url = self._total = self._count = self._partial = 0

    def url(self, piece: int) -> None:
        """``piece`` bytes of the request target arrived."""
        self.events += 1
        self._url += piece
        self._total += piece
        self._partial = 0
        line = self._limits.line_bytes
        if line and self._url > line:
            raise HeadTooLarge(
                414, f"the request target is longer than {line} bytes", "uri_too_long"
            )
        self._check_total()

    def field(self, name: bytes, value: bytes) -> None:
        """A whole header field arrived."""
        self.events += 1
        size = len(name) + len(value) + 2  # "name: value", as a client writes it
        self._total += size + 2  # and its line end
        self._count += 1
        self._partial = 0
        limits = self._limits
        if limits.count and self._count > limits.count:
            raise HeadTooLarge(
                431, f"the request has more than {limits.count} header fields", "too_many_headers"
            )
        if limits.line_bytes and size > limits.line_bytes:
            raise _line_too_long(limits.line_bytes)
        self._check_total()

    def complete(self) -> None:
        """The head is complete."""
        self.events += 1
        self.reading = False

    def fed(self, nbytes: int, events_before: int) -> None:
        """The parser was fed ``nbytes`` and is still reading a head; ``events_before`` is
        :attr:`events` before the feed. When nothing was handed over meanwhile, all of those
        bytes belong to the line in progress."""
        if not self.reading:
            return
        if self.events != events_before:
            # A piece was handed over: what follows it in this feed is not counted, which
            # lets the line in progress be up to one read longer before it is refused.
            self._partial = 0
            return
        self._partial += nbytes
        line = self._limits.line_bytes
        if line and self._partial > line:
            raise _line_too_long(line)
        self._check_total()

    def _check_total(self) -> None:
        total = self._limits.total_bytes
        if total and self._total + self._partial > total:
            raise HeadTooLarge(
                431,
                f"the request's header fields are larger than {total} bytes",
                "header_too_large",
            )


def _line_too_long(limit: int) -> HeadTooLarge:
    return HeadTooLarge(
        431, f"a request header field is longer than {limit} bytes", "header_too_large"
    )
