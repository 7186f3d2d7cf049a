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
from turnout.tool_calls.types import CallFormat

#: Characters of a function name written between special tokens.
NAME_CHARS = re.compile(r"[^\s<>{}\[\]\"'`]*")


class BlockCallsParser(GrammarToolParser):
    """``START`` + (call object | ``[`` call objects ``]``) + optional ``END``.

    The declarative base of every "marker + JSON" format: a subclass sets its markers and is a
    complete parser, streaming and one-shot, under the project rules (a call is released once
    its object is complete; broken calls and calls to functions not offered stay normal text)::

        class ArrowCalls(BlockCallsParser):
            START_MARKERS = (">>>",)
            END_MARKERS = ("<<<",)
            needs_special_tokens = False  # plain-text markers

    A single object's raw text counts from the start marker (a rejected call keeps its markers);
    in an array each element's raw text is the object itself and the wrapper is dropped. A start
    marker followed by anything else is handed to :meth:`other_block` (by default: text).
    """

    #: Markers that open a block (the first found in the text wins; list longer ones first).
    START_MARKERS: ClassVar[tuple[str, ...]] = ()
    #: Markers that close a block; optional at the end of output. Empty: no end marker.
    END_MARKERS: ClassVar[tuple[str, ...]] = ()
    #: Markers removed from normal text wherever they appear (e.g. response wrappers).
    DROP_MARKERS: ClassVar[tuple[str, ...]] = ()
    #: Keys of the call object (``name``, ``arguments`` or ``parameters`` by default).
    SHAPE: ClassVar[CallShape] = CallShape()
    #: Accept one call object after the start marker.
    ALLOW_OBJECT: ClassVar[bool] = True
    #: Accept an array of call objects after the start marker.
    ALLOW_ARRAY: ClassVar[bool] = True

    @classmethod
    def call_format(cls) -> CallFormat | None:
        """One call as this format writes it: the first start marker, a call object with the
        first name and arguments keys, the first end marker (None when the format takes no
        single call object)."""
        if not cls.START_MARKERS or not cls.ALLOW_OBJECT:
            return None
        start = cls.START_MARKERS[0]
        name_key, args_key = cls.SHAPE.name_keys[0], cls.SHAPE.args_keys[0]
        end = "}" + ("\n" + cls.END_MARKERS[0] if cls.END_MARKERS else "")
        return CallFormat(start, f'{start}\n{{"{name_key}": "{{name}}", "{args_key}": ', end)

    def grammar(self) -> Generator[None, None, None]:
        markers = self.START_MARKERS + self.DROP_MARKERS
        while True:
            marker = yield from self.text_until(markers)
            if marker is None:
                return
            if marker in self.DROP_MARKERS:
                continue
            self.start_block(marker)
            yield from self.skip_ws()
            c = yield from self.peek()
            if c == "{" and self.ALLOW_OBJECT:
                outcome = yield from self.call_object(self.SHAPE)
                if outcome == FAILED:
                    self.release()
                    continue
                yield from self.after_object(outcome)
            elif c == "[" and self.ALLOW_ARRAY:
                if (yield from self.call_array(self.SHAPE)) == FAILED:
                    self.release()
                    continue
                yield from self.close_block(self.END_MARKERS)
            else:
                yield from self.other_block()

    def after_object(self, outcome: str) -> Generator[None, None, None]:
        """After one call object (``outcome`` of :meth:`call_object`): read the end marker."""
        if not self.END_MARKERS:
            self.drop()
            return
        if outcome == OK:
            self.hold()
        # A rejected call passes its own end marker through as normal text.
        yield from self.skip_ws()
        end = yield from self.expect_any(self.END_MARKERS)
        if end is not None and outcome == OK:
            self.drop()
        else:
            self.release()

    def other_block(self) -> Generator[None, None, None]:
        """The start marker is followed by something else: by default it stays normal text."""
        self.release()
        yield from ()


class BareJsonParser(GrammarToolParser):
    """Call objects (``strict`` shape) or arrays of them written directly in the text.

    Calls may follow one of ``TAGS`` and be separated by ``SEPARATOR`` (dropped only between
    two calls). Text that merely looks like JSON stays normal text, verbatim.
    """

    #: Markers a call may follow (dropped before a call, kept as text otherwise).
    TAGS: ClassVar[tuple[str, ...]] = ()
    #: Text between two calls (``;``), dropped only there.
    SEPARATOR: ClassVar[str] = ""
    #: Optional closers after a call (dropped with the whitespace before them).
    END_MARKERS: ClassVar[tuple[str, ...]] = ()
    SHAPE: ClassVar[CallShape] = CallShape(strict=True)
    ALLOW_ARRAY: ClassVar[bool] = True
    needs_special_tokens: ClassVar[bool] = False

    def grammar(self) -> Generator[None, None, None]:
        starts = ("{", "[") if self.ALLOW_ARRAY else ("{",)
        markers = self.TAGS + starts
        while True:
            marker = yield from self.text_until(markers, consume=False)
            if marker is None:
                return
            self.hold()
            if marker in self.TAGS:
                self._consume(self._pos + len(marker))
                yield from self.skip_ws()
            while True:
                c = yield from self.peek()
                if c == "{":
                    self.mark_element()
                    if (yield from self.call_object(self.SHAPE)) == FAILED:
                        self.release()
                        break
                    self.hold()
                elif c == "[" and self.ALLOW_ARRAY:
                    if (yield from self.call_array(self.SHAPE)) == FAILED:
                        self.release()
                        break
                    self.drop()
                    self.hold()
                else:
                    self.release()
                    break
                yield from self.skip_ws()
                if self.END_MARKERS and (yield from self.expect_any(self.END_MARKERS)):
                    self.drop()
                    self.hold()
                    yield from self.skip_ws()
                if self.SEPARATOR and (yield from self.expect(self.SEPARATOR)):
                    yield from self.skip_ws()
                if self.TAGS and (yield from self.expect_any(self.TAGS)) is not None:
                    yield from self.skip_ws()


class TaggedCallsParser(GrammarToolParser):
    """A block begin (optional) + (``CALL_BEGIN`` head args tail)* + a block end.

    Subclasses read the head (up to where the arguments start) in :meth:`call_head`, which
    returns the function name, and may override :meth:`call_tail` (default: ``CALL_END``). A
    call is accepted without the block begin token; a missing block end is tolerated.
    """

    #: Markers that open a block of calls (optional before a call).
    BLOCK_BEGINS: ClassVar[tuple[str, ...]] = ()
    #: Markers that close the block.
    BLOCK_ENDS: ClassVar[tuple[str, ...]] = ()
    #: The marker that opens each call; :meth:`call_head` reads what follows.
    CALL_BEGIN: ClassVar[str] = ""
    #: The marker that closes each call (read by :meth:`call_tail`).
    CALL_END: ClassVar[str] = ""

    def call_head(self) -> Generator[None, None, str | None]:
        """Read a call's head after ``CALL_BEGIN``, up to its arguments; return the function
        name, or ``None`` when this is not a call (its text stays normal text)."""
        raise NotImplementedError

    def call_tail(self) -> Generator[None, None, bool]:
        """Read what follows a call's arguments; ``False`` when it is not ``CALL_END``."""
        yield from self.skip_ws()
        return (yield from self.expect(self.CALL_END))

    def grammar(self) -> Generator[None, None, None]:
        starts = (*self.BLOCK_BEGINS, self.CALL_BEGIN)
        closers = (self.CALL_BEGIN, *self.BLOCK_ENDS)
        while True:
            marker = yield from self.text_until(starts, consume=False)
            if marker is None:
                return
            self.hold()
            if marker != self.CALL_BEGIN:
                self._consume(self._pos + len(marker))
                yield from self.skip_ws()
            while True:
                self.mark_element()
                tag = yield from self.expect_any(closers)
                if tag is None:
                    self.release()
                    break
                if tag != self.CALL_BEGIN:
                    self.drop()
                    break
                name = yield from self.call_head()
                if name is None:
                    self.release()
                    break
                outcome = yield from self.named_call(name)
                if outcome == FAILED:
                    self.release()
                    break
                if outcome == OK:
                    self.hold()
                if not (yield from self.call_tail()):
                    self.release()
                    break
                if outcome == REJECTED:
                    self.hold()
                else:
                    self.drop()
                    self.hold()
                yield from self.skip_ws()
