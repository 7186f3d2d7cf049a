"""Shared machinery for incremental tool-call parsers written as a grammar over streamed text.

A parser subclasses :class:`GrammarToolParser` and writes its format as a generator method
:meth:`GrammarToolParser.grammar`. The grammar reads the buffered output with small helper
generators (``yield from self.peek()``, ``self.skip_ws()``, ``self.expect(lit)``, ``self.text_until
(markers)``, ``self.call_object(shape)``, ``self.named_call(name)``...). A helper that needs
more text yields; the driver resumes the grammar when the next delta arrives, or at ``finish``
with ``eof`` set, where every helper decides without waiting. Every decision therefore depends
only on the text, never on how it was chunked, and ``parse_complete`` simply runs the same
grammar over the whole text: streaming and one-shot results are identical by construction.

What happens to consumed text is governed by a *mode*:

* ``PASS`` - consumed text is normal text (outside calls, or inside a rejected call);
* ``HOLD`` - tentatively consumed (markers, the start of a call whose name is not known yet): kept
  in a list and later either dropped (it became a call) or released as text (it did not);
* ``DROP`` - consumed and discarded (the syntax of a released call).

Project-wide rules implemented here (parsers document their format-specific choices):

* A call is *released* (one delta: name and complete arguments) only once it is known to be
  valid: its name is complete and allowed and its arguments are a complete JSON value (for call
  objects, once the object has closed). Until then everything it consumed is held, so a call
  that turns out broken can still become normal text: an agent never receives a call whose
  arguments it cannot trust (see docs/plugins.md, "When calls are released").
* With a non-empty ``tools`` list, a call to another name is *rejected*: its raw text (from the
  element start, see :meth:`GrammarToolParser.mark_element`) stays in the normal text verbatim.
* Arguments are the model's JSON text verbatim (raw control characters inside strings escaped).
  A JSON string holding a JSON object is unwrapped once; ``null`` or missing arguments become
  ``{}``.
* If a call breaks (invalid JSON, or the output ends inside it), its whole raw text, markers
  included, is normal text; parsing resumes at the offending character.
* Exception: when the output was cut off by the token limit (``finish(truncated=True)``) inside
  a call whose name is known, the call is returned with its arguments as received so far (the
  client sees ``finish_reason: length``).
* If a block breaks before any call was announced, everything held is released as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from turnout.tool_calls.json_stream import DONE, RUNNING, JsonScanner
from turnout.tool_calls.markers import find_first_marker, partial_marker_suffix
from turnout.tool_calls.names import is_allowed, tool_names
from turnout.tool_calls.types import (
    CallIdStyle,
    ToolCallDelta,
    ToolParseResult,
    ToolParseStep,
    Tools,
    fold_steps,
)

_PASS: Final = 0
_HOLD: Final = 1
_DROP: Final = 2

#: Outcomes of :meth:`GrammarToolParser.call_object` / :meth:`GrammarToolParser.named_call`.
OK: Final = "ok"  # the call ended properly and was released
REJECTED: Final = "rejected"  # well-formed call to a function not offered: its text was released
FAILED: Final = "failed"  # not a call, or broken: held text still to release, resume at pos

_WS = re.compile(r"[ \t\n\r]*")
_UNSET: Final = object()


@dataclass(frozen=True, slots=True)
class CallShape:
    """Keys of a ``{"name": ..., "arguments": ...}`` call object in one format.

    ``strict`` (for bare-JSON formats found in prose): the object is only a call when its first
    keys are the name and arguments keys (in any order, ``extra_keys`` allowed among them); a
    call is recognised once both are seen. Otherwise it is recognised when its name is complete
    and other keys are ignored.
    """

    name_keys: tuple[str, ...] = ("name",)
    args_keys: tuple[str, ...] = ("arguments", "parameters")
    strict: bool = False
    extra_keys: tuple[str, ...] = ()


def finish_arguments(text: str, first: str) -> str:
    """Final form of a complete arguments value: unwrap a JSON string holding an object once,
    turn ``null`` into ``{}``; anything else is kept verbatim."""
    if first == '"':
        try:
            inner = json.loads(text)
            if isinstance(json.loads(inner), dict):
                return str(inner)
        except (ValueError, TypeError, RecursionError):
            pass
        return text
    if text == "null":
        return "{}"
    return text


class GrammarToolParser:
    """Base class of the grammar-driven parsers (see the module docstring).

    Most formats need no method at all: subclass :class:`~turnout.tool_calls.BlockCallsParser`
    (markers around JSON call objects), :class:`~turnout.tool_calls.BareJsonParser` or
    :class:`~turnout.tool_calls.TaggedCallsParser` and set their class attributes. A format of its
    own overrides :meth:`grammar` and writes it with the public helpers below:

    * reading (generators, used as ``yield from self.peek()``): :meth:`peek`, :meth:`skip_ws`,
      :meth:`expect`, :meth:`expect_any`, :meth:`text_until`, :meth:`name_until`, :meth:`word`,
      :meth:`skip_value`;
    * calls: :meth:`call_object`, :meth:`call_array`, :meth:`named_call` (they announce, read,
      confirm or reject a call and return ``OK``, ``REJECTED`` or ``FAILED``), or by hand
      :meth:`announce`, :meth:`read_arguments`, :meth:`confirm`, :meth:`emit_call`,
      :meth:`allowed`;
    * what happens to consumed text: :meth:`start_block`, :meth:`hold`, :meth:`mark_element`,
      :meth:`release`, :meth:`drop`, :meth:`reject`, :meth:`close_block`.

    Class attributes: ``call_id_style`` (see :class:`~turnout.tool_calls.ToolParser`) and
    ``needs_special_tokens`` (default True: set it False when the markers are plain text).
    """

    call_id_style: ClassVar[CallIdStyle] = "openai"
    needs_special_tokens: ClassVar[bool] = True

    def __init__(self) -> None:
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._tools_ref: object = _UNSET
        self._names: frozenset[str] | None = None
        self._text: list[str] = []
        self._pieces: list[tuple[int, str | None, str]] = []
        self._count = 0
        self._mode = _PASS
        self._held: list[str] = []
        self._elem = 0
        self._gen: Generator[None, None, None] | None = self.grammar()
        self._dead = False
        # The call being read (announced, not yet released): its name, its arguments text, and
        # where in ``_held`` the raw text of its arguments value starts (``None``: not reading).
        self._call: str | None = None
        self._call_args: list[str] = []
        self._raw_args: int | None = None

    # -- the format -------------------------------------------------------------------------------

    def grammar(self) -> Generator[None, None, None]:
        """The format: override it in a parser with a format of its own.

        A generator that reads the output with the reading helpers (``yield from
        self.text_until(markers)``...) and returns when the output is used up; it is started
        once per output and never sees how the text was chunked. Text it consumes is normal
        text unless :meth:`hold` or :meth:`announce` changed the mode; whatever it leaves
        unconsumed at the end is normal text too.
        """
        raise NotImplementedError

    # -- public API --------------------------------------------------------------------------

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        """Parse a whole output (runs the streaming grammar once over all of it)."""
        fresh = type(self)()
        first = fresh.parse_incremental(text, tools)
        return fold_steps([first, fresh.finish()])

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        """Consume the next piece of output; return what can be released now."""
        if tools is not self._tools_ref:
            self._tools_ref = tools
            self._names = tool_names(tools)
        if delta:
            if self._dead:
                self._text.append(delta)
            else:
                self._buf += delta
                self._drive()
        return self._take_step()

    def finish(self, truncated: bool = False) -> ToolParseStep:
        """End of output: run the grammar to its end and release whatever is still held.

        ``truncated``: the output was cut off by the token limit; a call being read is returned
        with its arguments as received instead of becoming text.
        """
        if not self._eof:
            self._eof = True
            if truncated and self._call is not None and self._gen is not None:
                self._keep_cut_off_call()
            else:
                self._drive()
        return self._take_step()

    def _keep_cut_off_call(self) -> None:
        """The output stopped inside a call: release it as received; the rest is its syntax."""
        assert self._call is not None
        if self._raw_args is None:
            arguments = "".join(self._call_args)
        else:
            arguments = ("".join(self._held[self._raw_args :]) + self._buf[self._pos :]).lstrip()
        self._pieces.append((self._count, self._call, arguments))
        self._count += 1
        self._call, self._call_args, self._raw_args = None, [], None
        self._held.clear()
        self._gen = None
        self._buf, self._pos = "", 0

    # -- driver -----------------------------------------------------------------------------------

    def _drive(self) -> None:
        gen = self._gen
        if gen is None:
            return
        try:
            for _ in range(1_000_000):
                next(gen)
                if not self._eof:
                    break
            else:  # pragma: no cover - a grammar that keeps yielding at end of output
                raise RuntimeError("grammar did not finish at end of output")
        except StopIteration:
            self._gen = None
            self._flush_rest()
        except Exception:  # pragma: no cover - a parser bug must never break the response
            self._gen = None
            self._dead = True
            self._flush_rest()
        if self._pos:
            self._buf = self._buf[self._pos :]
            self._pos = 0

    def _flush_rest(self) -> None:
        if self._held:
            self._text.extend(self._held)
            self._held.clear()
        if self._pos < len(self._buf):
            self._text.append(self._buf[self._pos :])
            self._pos = len(self._buf)

    def _take_step(self) -> ToolParseStep:
        text = "".join(self._text) if self._text else ""
        self._text.clear()
        if not self._pieces:
            return ToolParseStep(text)
        deltas: list[ToolCallDelta] = []
        index, name, parts = self._pieces[0][0], self._pieces[0][1], [self._pieces[0][2]]
        for i, n, a in self._pieces[1:]:
            if i == index and n is None:
                parts.append(a)
                continue
            deltas.append(ToolCallDelta(index, name, "".join(parts)))
            index, name, parts = i, n, [a]
        deltas.append(ToolCallDelta(index, name, "".join(parts)))
        self._pieces.clear()
        return ToolParseStep(text, deltas)

    # -- modes and emission -----------------------------------------------------------------------

    def _consume(self, end: int) -> str:
        raw = self._buf[self._pos : end]
        self._pos = end
        if raw:
            if self._mode == _PASS:
                self._text.append(raw)
            elif self._mode == _HOLD:
                self._held.append(raw)
        return raw

    def start_block(self, marker: str) -> None:
        """A block starts with ``marker`` (already read): hold it, the element starts here."""
        self._mode = _HOLD
        self._held.append(marker)
        self._elem = 0

    def hold(self) -> None:
        """Hold consumed text from here on (it is kept until released or dropped)."""
        self._mode = _HOLD

    def mark_element(self) -> None:
        """The current call element's raw text starts here (what a rejection releases)."""
        self._elem = len(self._held)

    def release(self) -> None:
        """Held text was not a call after all (or a call broke): emit it as normal text;
        consumed text passes."""
        if self._held:
            self._text.extend(self._held)
            self._held.clear()
        self._call, self._call_args, self._raw_args = None, [], None
        self._elem = 0
        self._mode = _PASS

    def drop(self) -> None:
        """Held text was format syntax: discard it; consumed text passes from here on."""
        self._held.clear()
        self._elem = 0
        self._mode = _PASS

    def reject(self) -> None:
        """The current element is a call to a function not offered: keep its raw text."""
        self._text.extend(self._held[self._elem :])
        self._held.clear()
        self._elem = 0
        self._mode = _PASS

    def announce(self, name: str, arguments: str = "") -> None:
        """A call to ``name`` starts: from here its text is held until :meth:`confirm` releases
        the call or :meth:`release` turns it into normal text."""
        self._mode = _HOLD
        self._call = name
        self._call_args = [arguments] if arguments else []
        self._raw_args = None

    def _args(self, text: str) -> None:
        if text:
            self._call_args.append(text)

    def confirm(self) -> None:
        """The call being read is complete and valid: release it, drop its syntax."""
        assert self._call is not None
        self._pieces.append((self._count, self._call, "".join(self._call_args)))
        self._count += 1
        self._call, self._call_args, self._raw_args = None, [], None
        self._held.clear()
        self._elem = 0
        self._mode = _DROP

    def emit_call(self, name: str, arguments: str) -> None:
        """Release a complete call at once (formats that validate a call before announcing it)."""
        self.announce(name, arguments)
        self.confirm()

    def allowed(self, name: str) -> bool:
        """Whether a call to ``name`` may be released (the request offered it, or no tools)."""
        return is_allowed(name, self._names)

    # -- reading helpers (generators) -------------------------------------------------------------

    def peek(self) -> Generator[None, None, str | None]:
        """The next character (not consumed), or ``None`` at end of output."""
        while self._pos >= len(self._buf):
            if self._eof:
                return None
            yield
        return self._buf[self._pos]

    def skip_ws(self) -> Generator[None, None, None]:
        """Consume whitespace up to the next other character (or the end of output)."""
        while True:
            end = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            self._consume(end)
            if end < len(self._buf) or self._eof:
                return
            yield

    def expect(self, literal: str) -> Generator[None, None, bool]:
        """Consume ``literal`` if the text continues with it; else consume nothing."""
        while True:
            avail = self._buf[self._pos : self._pos + len(literal)]
            if avail == literal:
                self._consume(self._pos + len(literal))
                return True
            if self._eof or not literal.startswith(avail):
                return False
            yield

    def expect_any(self, literals: Sequence[str]) -> Generator[None, None, str | None]:
        """Consume and return the first of ``literals`` the text continues with (or ``None``).

        Waits while an earlier literal could still match, so list longer literals first.
        """
        if not literals:
            return None
        longest = max(len(lit) for lit in literals)
        while True:
            rest = self._buf[self._pos : self._pos + longest]
            undecided = False
            for lit in literals:
                if rest.startswith(lit):
                    if undecided:
                        break
                    self._consume(self._pos + len(lit))
                    return lit
                if not self._eof and lit.startswith(rest):
                    undecided = True
            if not undecided:
                return None
            yield

    def text_until(
        self, markers: Sequence[str], consume: bool = True
    ) -> Generator[None, None, str | None]:
        """Emit normal text up to the first marker and return it (``None`` at end of output).

        Only a possible prefix of a marker is held back. With ``consume=False`` the marker stays
        unread. The mode must be ``PASS``.
        """
        while True:
            hit = find_first_marker(self._buf, markers, self._pos)
            if hit is not None:
                pos, marker = hit
                self._consume(pos)
                rest = self._buf[pos:]
                if not self._eof and any(
                    len(m) > len(rest) and m.startswith(rest) for m in markers
                ):
                    yield  # a longer marker may still start here ("[" vs "[TOOL_CALLS]")
                    continue
                if consume:
                    self._pos += len(marker)
                return marker
            if self._eof:
                self._consume(len(self._buf))
                return None
            keep = partial_marker_suffix(self._buf[self._pos :], markers)
            self._consume(len(self._buf) - keep)
            yield

    def name_until(
        self, markers: Sequence[str], allowed: re.Pattern[str], limit: int = 256
    ) -> Generator[None, None, tuple[str, str] | None]:
        """Read a name made of ``allowed`` characters that ends at one of ``markers``.

        Consumes both and returns ``(name, marker)``; returns ``None`` (consuming nothing) when
        the text does not have that shape.
        """
        longest = max(len(m) for m in markers)
        while True:
            end = allowed.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if end - self._pos > limit:
                return None
            rest = self._buf[end : end + longest]
            for marker in markers:
                if rest.startswith(marker):
                    name = self._buf[self._pos : end]
                    self._consume(end + len(marker))
                    return name, marker
            if self._eof or not any(m.startswith(rest) for m in markers):
                return None
            yield

    def word(self, allowed: re.Pattern[str], limit: int = 256) -> Generator[None, None, str | None]:
        """Read and consume a run of ``allowed`` characters (``None`` if longer than ``limit``)."""
        while True:
            end = allowed.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if end - self._pos > limit:
                return None
            if end < len(self._buf) or self._eof:
                word = self._buf[self._pos : end]
                self._consume(end)
                return word
            yield

    def _scan(self, scanner: JsonScanner) -> Generator[None, None, None]:
        """Run ``scanner`` over the text (consumed in the current mode) until its value ends."""
        while True:
            end = scanner.feed(self._buf, self._pos, self._eof)
            self._consume(end)
            if scanner.status != RUNNING or self._eof:
                return
            yield

    # -- calls ------------------------------------------------------------------------------------

    def read_arguments(self) -> Generator[None, None, bool]:
        """Read the current (announced) call's arguments value; ``True`` if it is valid JSON.

        Its raw text stays held (a broken value makes the whole call normal text).
        """
        scanner = JsonScanner(capture=True)
        self._raw_args = len(self._held)
        while True:
            end = scanner.feed(self._buf, self._pos, self._eof)
            self._consume(end)
            if scanner.status == DONE:
                self._raw_args = None
                self._args(finish_arguments(scanner.take(), scanner.first))
                return True
            if scanner.status != RUNNING or self._eof:
                return False
            yield

    def skip_value(self) -> Generator[None, None, bool]:
        """Consume one JSON value in the current mode; ``True`` if it was valid."""
        scanner = JsonScanner(capture=False)
        yield from self._scan(scanner)
        return scanner.status == DONE

    def named_call(self, name: str) -> Generator[None, None, str]:
        """A call whose name came from the format's syntax; its arguments value follows.

        Announces the call (or rejects it) and reads the arguments. Returns ``OK`` (the call
        was released), ``REJECTED`` or ``FAILED`` (broken arguments: the caller releases the
        held text, the call included).
        """
        if not name or not self.allowed(name):
            self.reject()
            return REJECTED if (yield from self.skip_value()) else FAILED
        self.announce(name)
        if not (yield from self.read_arguments()):
            return FAILED
        self.confirm()
        return OK

    def call_object(self, shape: CallShape) -> Generator[None, None, str]:
        """Read a ``{"name": ..., "arguments": ...}`` call object starting at ``{``.

        Returns ``OK`` (object closed, the call released), ``REJECTED`` (a call to a function not
        offered, its raw text released) or ``FAILED`` (not a call, or broken: held text, the
        call's included, is still to be released by the caller).
        """
        self._consume(self._pos + 1)  # "{"
        name: str | None = None
        args: str | None = None  # arguments captured before the name was known
        have_args = False
        state = "open"  # "open" (not recognised), "call", "rejected", "other" (not a call)
        yield from self.skip_ws()
        c = yield from self.peek()
        if c == "}":
            self._consume(self._pos + 1)
            return FAILED
        while True:
            if c != '"':
                break
            key_scanner = JsonScanner(capture=True)
            yield from self._scan(key_scanner)
            if key_scanner.status != DONE:
                break
            key = json.loads(key_scanner.take())
            yield from self.skip_ws()
            if not (yield from self.expect(":")):
                break
            yield from self.skip_ws()
            is_name = key in shape.name_keys and name is None
            is_args = key in shape.args_keys and not have_args
            strict_other = shape.strict and not (is_name or is_args or key in shape.extra_keys)
            if state == "open" and strict_other:
                self.release()
                state = "other"
            if state == "open" and is_args and name is not None:
                # Strict shapes are recognised here: name known, arguments starting.
                if self.allowed(name):
                    self.announce(name)
                    state = "call"
                else:
                    self.reject()
                    state = "rejected"
            if state in ("open", "call") and is_name:
                scanner = JsonScanner(capture=True)
                yield from self._scan(scanner)
                if scanner.status != DONE:
                    break
                value = json.loads(scanner.take())
                if state == "call":
                    pass  # a second name key after recognition is ignored
                elif not isinstance(value, str) or not value:
                    self.release()
                    state = "other"
                else:
                    name = value
                    if not shape.strict or have_args:
                        if self.allowed(name):
                            self.announce(name, "" if args is None else args)
                            state = "call"
                        else:
                            self.reject()
                            state = "rejected"
            elif state == "call" and is_args:
                have_args = True
                if not (yield from self.read_arguments()):
                    return FAILED
            elif state == "open" and is_args:
                have_args = True
                scanner = JsonScanner(capture=True)
                yield from self._scan(scanner)
                if scanner.status != DONE:
                    break
                args = finish_arguments(scanner.take(), scanner.first)
            elif not (yield from self.skip_value()):
                break
            yield from self.skip_ws()
            c = yield from self.peek()
            if c == ",":
                self._consume(self._pos + 1)
                yield from self.skip_ws()
                c = yield from self.peek()
                continue
            if c == "}":
                self._consume(self._pos + 1)
                if state == "call":
                    if not have_args:
                        self._args("{}")
                    self.confirm()
                    return OK
                if state == "rejected":
                    return REJECTED
                return FAILED
            break
        return FAILED  # broken object

    def call_array(self, shape: CallShape) -> Generator[None, None, str]:
        """Read ``[call, call, ...]`` starting at ``[`` (the wrapper before it is held).

        Returns ``OK`` when the array closed after at least one element (the mode is then
        ``HOLD``, with the closing bracket held for the caller to drop), else ``FAILED`` (held
        text still to release, resume at the current position).
        """
        self.hold()
        self._consume(self._pos + 1)  # "["
        yield from self.skip_ws()
        c = yield from self.peek()
        while c == "{":
            self.mark_element()
            outcome = yield from self.call_object(shape)
            if outcome == FAILED:
                return FAILED
            self.hold()
            yield from self.skip_ws()
            c = yield from self.peek()
            if c == ",":
                self._consume(self._pos + 1)
                yield from self.skip_ws()
                c = yield from self.peek()
                continue
            if c == "]":
                self._consume(self._pos + 1)
                return OK
            return FAILED
        return FAILED

    def close_block(self, end_markers: Sequence[str]) -> Generator[None, None, None]:
        """After a block: drop held syntax, then an optional end marker (whitespace before it
        is dropped with it; without it the whitespace stays normal text)."""
        self.drop()
        if not end_markers:
            return
        self.hold()
        yield from self.skip_ws()
        if (yield from self.expect_any(end_markers)) is not None:
            self.drop()
        else:
            self.release()
