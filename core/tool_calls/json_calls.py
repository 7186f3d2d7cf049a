"""Grammars shared by the "marker + JSON" tool-call formats, so no parser re-implements them.

* :class:`BlockCallsParser` - a start marker, then one call object or an array of them, then an
  optional end marker (Qwen/Hermes, Mistral, Cohere, Granite, Jamba, InternLM, xLAM).
* :class:`BareJsonParser` - call objects (or arrays of them) found directly in the text, optionally
  after a tag and separated by a separator (the ``json`` format, Llama 3.x).
* :class:`TaggedCallsParser` - each call framed by special tokens with the name in the frame and
  the arguments JSON inside (DeepSeek V3/V3.1, Kimi-K2).

All of them run on :class:`turnout.tool_calls.base.GrammarToolParser` and share its rules.
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import ClassVar

from turnout.tool_calls.base import FAILED, OK, REJECTED, CallShape, GrammarToolParser

#: Characters of a function name written between special tokens.
NAME_CHARS = re.compile(r"[^\s<>{}\[\]\"'`]*")


class BlockCallsParser(GrammarToolParser):
    """``START`` + (call object | ``[`` call objects ``]``) + optional ``END``.

    A single object's raw text counts from the start marker (a rejected call keeps its markers);
    in an array each element's raw text is the object itself and the wrapper is dropped.
    """

    START_MARKERS: ClassVar[tuple[str, ...]] = ()
    END_MARKERS: ClassVar[tuple[str, ...]] = ()
    #: Markers removed from normal text wherever they appear (e.g. response wrappers).
    DROP_MARKERS: ClassVar[tuple[str, ...]] = ()
    SHAPE: ClassVar[CallShape] = CallShape()
    ALLOW_OBJECT: ClassVar[bool] = True
    ALLOW_ARRAY: ClassVar[bool] = True

    def _grammar(self) -> Generator[None, None, None]:
        markers = self.START_MARKERS + self.DROP_MARKERS
        while True:
            marker = yield from self._text_until(markers)
            if marker is None:
                return
            if marker in self.DROP_MARKERS:
                continue
            self._start_block(marker)
            yield from self._ws()
            c = yield from self._peek()
            if c == "{" and self.ALLOW_OBJECT:
                outcome = yield from self._call_object(self.SHAPE)
                if outcome == FAILED:
                    self._release()
                    continue
                yield from self._after_object(outcome)
            elif c == "[" and self.ALLOW_ARRAY:
                if (yield from self._call_array(self.SHAPE)) == FAILED:
                    self._release()
                    continue
                yield from self._close_block(self.END_MARKERS)
            else:
                yield from self._other_block()

    def _after_object(self, outcome: str) -> Generator[None, None, None]:
        if not self.END_MARKERS:
            self._drop()
            return
        if outcome == OK:
            self._hold()
        # A rejected call passes its own end marker through as normal text.
        yield from self._ws()
        end = yield from self._expect_any(self.END_MARKERS)
        if end is not None and outcome == OK:
            self._drop()
        else:
            self._release()

    def _other_block(self) -> Generator[None, None, None]:
        """The start marker is followed by something else: by default it stays normal text."""
        self._release()
        yield from ()


class BareJsonParser(GrammarToolParser):
    """Call objects (``strict`` shape) or arrays of them written directly in the text.

    Calls may follow one of ``TAGS`` and be separated by ``SEPARATOR`` (dropped only between
    two calls). Text that merely looks like JSON stays normal text, verbatim.
    """

    TAGS: ClassVar[tuple[str, ...]] = ()
    SEPARATOR: ClassVar[str] = ""
    #: Optional closers after a call (dropped with the whitespace before them).
    END_MARKERS: ClassVar[tuple[str, ...]] = ()
    SHAPE: ClassVar[CallShape] = CallShape(strict=True)
    ALLOW_ARRAY: ClassVar[bool] = True
    needs_special_tokens: ClassVar[bool] = False

    def _grammar(self) -> Generator[None, None, None]:
        starts = ("{", "[") if self.ALLOW_ARRAY else ("{",)
        markers = self.TAGS + starts
        while True:
            marker = yield from self._text_until(markers, consume=False)
            if marker is None:
                return
            self._hold()
            if marker in self.TAGS:
                self._consume(self._pos + len(marker))
                yield from self._ws()
            while True:
                c = yield from self._peek()
                if c == "{":
                    self._mark_element()
                    if (yield from self._call_object(self.SHAPE)) == FAILED:
                        self._release()
                        break
                    self._hold()
                elif c == "[" and self.ALLOW_ARRAY:
                    if (yield from self._call_array(self.SHAPE)) == FAILED:
                        self._release()
                        break
                    self._drop()
                    self._hold()
                else:
                    self._release()
                    break
                yield from self._ws()
                if self.END_MARKERS and (yield from self._expect_any(self.END_MARKERS)):
                    self._drop()
                    self._hold()
                    yield from self._ws()
                if self.SEPARATOR and (yield from self._expect(self.SEPARATOR)):
                    yield from self._ws()
                if self.TAGS and (yield from self._expect_any(self.TAGS)) is not None:
                    yield from self._ws()


class TaggedCallsParser(GrammarToolParser):
    """A block begin (optional) + (``CALL_BEGIN`` head args tail)* + a block end.

    Subclasses read the head (up to where the arguments start) in :meth:`_call_head`, which
    returns the function name, and may override :meth:`_call_tail` (default: ``CALL_END``). A
    call is accepted without the block begin token; a missing block end is tolerated.
    """

    BLOCK_BEGINS: ClassVar[tuple[str, ...]] = ()
    BLOCK_ENDS: ClassVar[tuple[str, ...]] = ()
    CALL_BEGIN: ClassVar[str] = ""
    CALL_END: ClassVar[str] = ""

    def _call_head(self) -> Generator[None, None, str | None]:
        raise NotImplementedError

    def _call_tail(self) -> Generator[None, None, bool]:
        yield from self._ws()
        return (yield from self._expect(self.CALL_END))

    def _grammar(self) -> Generator[None, None, None]:
        starts = (*self.BLOCK_BEGINS, self.CALL_BEGIN)
        closers = (self.CALL_BEGIN, *self.BLOCK_ENDS)
        while True:
            marker = yield from self._text_until(starts, consume=False)
            if marker is None:
                return
            self._hold()
            if marker != self.CALL_BEGIN:
                self._consume(self._pos + len(marker))
                yield from self._ws()
            while True:
                self._mark_element()
                tag = yield from self._expect_any(closers)
                if tag is None:
                    self._release()
                    break
                if tag != self.CALL_BEGIN:
                    self._drop()
                    break
                name = yield from self._call_head()
                if name is None:
                    self._release()
                    break
                outcome = yield from self._named_call(name)
                if outcome == FAILED:
                    self._release()
                    break
                if outcome == OK:
                    self._hold()
                if not (yield from self._call_tail()):
                    self._release()
                    break
                if outcome == REJECTED:
                    self._hold()
                else:
                    self._drop()
                    self._hold()
                yield from self._ws()
