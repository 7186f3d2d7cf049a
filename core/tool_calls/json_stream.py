"""Incremental JSON value scanner: validates one JSON value as text arrives, chunk by chunk.

:class:`JsonScanner` is fed successive pieces of text and reports when its value is complete
(``DONE``), broken (``ERROR``) or still open (``RUNNING``). With ``capture=True`` it also keeps
the value's text and releases it in *safe* pieces (:meth:`JsonScanner.take`): a piece is released
only when everything released so far plus :meth:`JsonScanner.closing` is valid JSON, so a
streamed fragment never has to be taken back. Released text is the model's own text, verbatim,
except that raw control characters inside strings (invalid JSON) are escaped.

Cost is linear in the input whatever the chunking: string contents are skipped with a regex,
state lives in the scanner, and nothing is re-scanned. A value that is already complete when
the scanner first sees it (a one-shot answer) is checked at once by the C JSON decoder; when
that decoder refuses it (broken, or valid only with :meth:`JsonScanner.feed`'s tolerance of raw
control characters) the character scan decides.
"""

from __future__ import annotations

import json
import re
from typing import Final, NoReturn

RUNNING: Final = 0
DONE: Final = 1
ERROR: Final = 2

# Scanner modes.
_VALUE, _OBJ_FIRST, _OBJ_KEY, _COLON, _ARR_FIRST, _AFTER, _STR, _NUM, _LIT, _END = range(10)

_WS_RUN = re.compile(r"[ \t\n\r]*")
_STR_STOP = re.compile(r'["\\\x00-\x1f]')
_NUM_RUN = re.compile(r"[-+0-9.eE]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_HEX = frozenset("0123456789abcdefABCDEF")
_SIMPLE_ESCAPES = frozenset('"\\/bfnrt')
_LITERALS = ("true", "false", "null")
_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _escape_control(char: str) -> str:
    return _CONTROL.get(char) or f"\\u{ord(char):04x}"


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


#: Standard JSON only: raw control characters in strings and NaN/Infinity are refused.
_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)


class JsonScanner:
    """Scan one JSON value (leading whitespace skipped) from successive pieces of text.

    ``feed(text, i, eof)`` scans ``text[i:]`` and returns the index where it stopped: the end of
    the value once ``status == DONE`` (a number ends at the first character after it), the
    offending character once ``status == ERROR``, else ``len(text)``. ``first`` is the value's
    first character (``""`` before it is seen).
    """

    __slots__ = (
        "_capture",
        "_esc",
        "_in_key",
        "_mode",
        "_out",
        "_pend",
        "_safe_close",
        "_stack",
        "_tok",
        "first",
        "status",
    )

    def __init__(self, capture: bool = True) -> None:
        self._capture = capture
        self.status = RUNNING
        self.first = ""
        self._mode = _VALUE
        self._stack: list[str] = []
        self._in_key = False
        # 0: not in an escape; -1: after a backslash; k > 0: k hex digits of \uXXXX still due.
        self._esc = 0
        self._tok = ""
        self._out: list[str] = []
        self._pend: list[str] = []
        self._safe_close = ""

    # -- results -------------------------------------------------------------------------------

    def take(self) -> str:
        """Safe text released since the last call (see the module docstring)."""
        if not self._out:
            return ""
        text = "".join(self._out)
        self._out.clear()
        return text

    def closing(self) -> str:
        """What closes the text released so far into valid JSON (``'"}'`` etc.)."""
        return self._safe_close

    @property
    def depth(self) -> int:
        """Nesting depth inside the value (0 at top level)."""
        return len(self._stack)

    # -- internals -------------------------------------------------------------------------------

    def _clean(self, close: str) -> None:
        # Everything so far (pending included) plus ``close`` is valid JSON: release it.
        if self._pend:
            self._out.extend(self._pend)
            self._pend.clear()
        self._safe_close = close

    def _value_end(self) -> None:
        if not self._stack:
            self._mode = _END
            self.status = DONE
            self._clean("")
        else:
            self._mode = _AFTER
            self._clean("".join(reversed(self._stack)))

    def _fail(self) -> None:
        self.status = ERROR
        self._pend.clear()

    def _finish_eof(self) -> None:
        if self._mode == _NUM and _NUMBER.fullmatch(self._tok):
            self._value_end()
        if self.status == RUNNING:
            self._fail()

    def _whole(self, text: str, i: int) -> int:
        """Take a string, object or array that is complete in ``text[i:]`` at once (the value
        has not started yet); its end, or -1 when the character scan must decide."""
        start = _WS_RUN.match(text, i).end()  # type: ignore[union-attr]
        if start == len(text):
            return -1
        first = text[start]
        if first not in '"{[':
            return -1  # a number or a literal may go on in the next piece
        try:
            end: int = _STRICT.raw_decode(text, start)[1]
        except (ValueError, RecursionError):
            return -1
        self.first = first
        if self._capture:
            self._out.append(text[start:end])
        self._mode = _END
        self.status = DONE
        return end

    def feed(self, text: str, i: int = 0, eof: bool = False) -> int:
        """Scan ``text[i:]``; ``eof`` says no more text will follow."""
        if not self.first and self._mode == _VALUE and self.status == RUNNING:
            end = self._whole(text, i)
            if end >= 0:
                return end
        n = len(text)
        capture = self._capture
        pend = self._pend
        while i < n and self.status == RUNNING:
            mode = self._mode
            if mode == _STR:
                if self._esc:
                    c = text[i]
                    if self._esc == -1:
                        if c in _SIMPLE_ESCAPES:
                            self._esc = 0
                        elif c == "u":
                            self._esc = 4
                        else:
                            self._fail()
                            return i
                    elif c in _HEX:
                        self._esc -= 1
                    else:
                        self._fail()
                        return i
                    if capture:
                        pend.append(c)
                    i += 1
                    if not self._esc and not self._in_key:
                        self._clean(self._safe_close)
                    continue
                m = _STR_STOP.search(text, i)
                stop = m.start() if m else n
                if stop > i and capture:
                    if self._in_key:
                        pend.append(text[i:stop])
                    else:
                        self._out.append(text[i:stop])
                i = stop
                if i == n:
                    break
                c = text[i]
                i += 1
                if c == '"':
                    if capture:
                        pend.append(c)
                    if self._in_key:
                        self._in_key = False
                        self._mode = _COLON
                    else:
                        self._value_end()
                elif c == "\\":
                    if capture:
                        pend.append(c)
                    self._esc = -1
                elif capture:
                    escaped = _escape_control(c)
                    if self._in_key:
                        pend.append(escaped)
                    else:
                        self._out.append(escaped)
                continue
            if mode == _NUM:
                stop = _NUM_RUN.match(text, i).end()  # type: ignore[union-attr]
                if stop > i:
                    self._tok += text[i:stop]
                    if capture:
                        pend.append(text[i:stop])
                    i = stop
                    if i == n:
                        break
                if not _NUMBER.fullmatch(self._tok):
                    self._fail()
                    return i
                self._value_end()
                continue
            c = text[i]
            if mode == _LIT:
                tok = self._tok + c
                if capture:
                    pend.append(c)
                i += 1
                if tok in _LITERALS:
                    self._tok = tok
                    self._value_end()
                elif any(lit.startswith(tok) for lit in _LITERALS):
                    self._tok = tok
                else:
                    self._fail()
                    return i - 1
                continue
            if c in " \t\n\r":
                stop = _WS_RUN.match(text, i).end()  # type: ignore[union-attr]
                if capture and (self._stack or mode != _VALUE):
                    pend.append(text[i:stop])
                    if mode in (_AFTER, _OBJ_FIRST, _ARR_FIRST):
                        self._clean(self._safe_close)
                i = stop
                continue
            if mode in (_VALUE, _ARR_FIRST):
                if not self.first:
                    self.first = c
                if c in "{[":
                    self._stack.append("}" if c == "{" else "]")
                    if capture:
                        pend.append(c)
                    self._mode = _OBJ_FIRST if c == "{" else _ARR_FIRST
                    self._clean("".join(reversed(self._stack)))
                elif c == '"':
                    if capture:
                        pend.append(c)
                    self._mode = _STR
                    self._in_key = False
                    self._clean('"' + "".join(reversed(self._stack)))
                elif c == "-" or "0" <= c <= "9":
                    self._mode = _NUM
                    self._tok = ""
                    continue  # the number run starts at this character
                elif c in "tfn":
                    self._mode = _LIT
                    self._tok = c
                    if capture:
                        pend.append(c)
                elif c == "]" and mode == _ARR_FIRST:
                    self._stack.pop()
                    if capture:
                        pend.append(c)
                    i += 1
                    self._value_end()
                    continue
                else:
                    self._fail()
                    return i
                i += 1
                continue
            if mode in (_OBJ_FIRST, _OBJ_KEY):
                if c == '"':
                    if capture:
                        pend.append(c)
                    self._mode = _STR
                    self._in_key = True
                elif c == "}" and mode == _OBJ_FIRST:
                    self._stack.pop()
                    if capture:
                        pend.append(c)
                    i += 1
                    self._value_end()
                    continue
                else:
                    self._fail()
                    return i
                i += 1
                continue
            if mode == _COLON:
                if c != ":":
                    self._fail()
                    return i
                if capture:
                    pend.append(c)
                self._mode = _VALUE
                i += 1
                continue
            # _AFTER
            if c == ",":
                if capture:
                    pend.append(c)
                self._mode = _OBJ_KEY if self._stack[-1] == "}" else _VALUE
            elif c == self._stack[-1]:
                self._stack.pop()
                if capture:
                    pend.append(c)
                i += 1
                self._value_end()
                continue
            else:
                self._fail()
                return i
            i += 1
        if eof and self.status == RUNNING:
            self._finish_eof()
        return i
