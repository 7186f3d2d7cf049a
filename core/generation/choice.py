"""Per-choice output processing: token ids → text (detokenizer, stop strings) → reasoning
parser → tool parser → :class:`ChoiceDelta` events; or, for a model with a chat format, token
ids → the format's output reader → the same events. One instance per choice of one request.

With a tool parser, content that ends in whitespace keeps that whitespace back until it is
known whether more content follows: when the output makes calls, trailing whitespace (what
separated the text from a call, or all of a whitespace-only content) is dropped, so such content
is ``"Let me check."`` rather than ``"Let me check.\n"``, and null rather than ``"\n\n"``. The
rule depends only on the folded text, so streaming and one-shot answers agree.
"""

from __future__ import annotations

import itertools
import logging
import random
import secrets
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from turnout.chat_formats.types import OutputReader
from turnout.errors import ParserError
from turnout.generation.events import ChoiceDelta, ChoiceEnd, TokenLogprob, ToolCallPiece
from turnout.observability.metrics import note_parser_error
from turnout.reasoning.types import ReasoningParser
from turnout.tool_calls.types import ToolCallDelta, ToolParser, Tools

log = logging.getLogger(__name__)

_ID_ALPHABET = string.ascii_letters + string.digits


class TextDecoder(Protocol):
    """Incremental detokenizer of one output."""

    def push(self, token_ids: Sequence[int]) -> str:
        """New text for new token ids."""
        ...

    def finish(self) -> str:
        """Text still held back at the end."""
        ...

    def fork(self) -> TextDecoder:
        """An independent copy in the same state."""
        ...


class StopMatcher(Protocol):
    """Stop-string matcher of one output."""

    #: Characters of the last pushed text after the matched stop.
    overshoot: int

    def push(self, text: str) -> tuple[str, str | None]:
        """Released text and the stop string if one matched."""
        ...

    def finish(self) -> str:
        """Held-back text at the end (no stop matched)."""
        ...


class CallIds:
    """Makes the ids clients see for tool calls."""

    __slots__ = ("_offset", "_style")

    def __init__(self, style: str, history_calls: int = 0) -> None:
        self._style = style
        self._offset = history_calls

    @classmethod
    def of(cls, style: str, history_calls: int = 0) -> CallIds:
        """The ids of one output: shared by every output of ``style`` unless its ids number the
        calls after the history's (``kimi``), so that an output keeps no object of its own."""
        if style == "kimi":
            return cls(style, history_calls)
        shared = _SHARED_IDS.get(style)
        if shared is None:
            shared = _SHARED_IDS[style] = cls(style)
        return shared

    def make(self, index: int, name: str) -> str:
        """An id for call ``index`` of this output."""
        if self._style == "kimi":
            return f"functions.{name}:{self._offset + index}"
        if self._style == "mistral":
            return "".join(secrets.choice(_ID_ALPHABET) for _ in range(9))
        # Ids need to be unique, not secret: the module's generator (reseeded in each forked
        # serving process) costs no system call, unlike ``secrets``.
        return f"call_{random.getrandbits(96):024x}"


_SHARED_IDS: dict[str, CallIds] = {}

#: Text and real bytes of one token (logprobs).
TokenPiece = Callable[[int], tuple[str, bytes]]


class ChoiceProcessor:
    """Turns one choice's token ids into content, reasoning and tool-call deltas."""

    def __init__(
        self,
        index: int,
        *,
        decoder: TextDecoder,
        stops: StopMatcher | None = None,
        reasoning: ReasoningParser | None = None,
        tool_parser: ToolParser | None = None,
        tools: Tools = None,
        call_ids: CallIds | None = None,
        hidden_stop_ids: frozenset[int] = frozenset(),
        token_piece: TokenPiece | None = None,
        keep_token_ids: bool = False,
        stop_token_logprobs: bool = False,
        top_logprobs: int | None = None,
        max_calls: int | None = None,
        tool_parser_name: str | None = None,
        reasoning_parser_name: str | None = None,
        reader: OutputReader | None = None,
        reader_reasoning: bool = True,
        reader_calls: bool = True,
        reader_name: str | None = None,
    ) -> None:
        """``token_piece`` gives the text and bytes of logprob tokens (without it, logprobs are
        not reported). The parser names (as registered) attribute a parser's failure.

        A chat format's ``reader`` reads the token ids instead of the decoder and the parsers;
        its reasoning is reasoning (``reader_reasoning``, else content) and its calls are tool
        calls (``reader_calls``, else their arguments are content)."""
        self.index = index
        self._decoder = decoder
        self._stops = stops
        self._reasoning = reasoning
        self._tool_parser = tool_parser
        self._tools = tools
        #: The registered names of the parsers (attributing a failure), as given.
        self._parser_names = (tool_parser_name, reasoning_parser_name, reader_name)
        self._reader = reader
        self._reader_reasoning = reader_reasoning
        self._reader_calls = reader_calls
        self._call_ids = call_ids or CallIds.of("openai")
        self._hidden_stop_ids = hidden_stop_ids
        self._token_piece = token_piece
        self._keep_token_ids = keep_token_ids
        self._stop_token_logprobs = stop_token_logprobs
        self._top_logprobs = top_logprobs
        #: ``parallel_tool_calls: false`` allows one call: later calls are dropped.
        self._max_calls = max_calls
        #: Trailing whitespace of the content, held back while a call may follow.
        self._holds_space = tool_parser is not None
        self._held_space = ""
        self.tokens = 0
        #: Characters of reasoning and of normal text released so far (for the token estimate).
        self._reasoning_chars = 0
        self._normal_chars = 0
        self.calls = 0
        #: Set when turnout itself matched a stop string: the worker must be told to stop.
        self.matched_stop: str | None = None
        self.done = False
        #: Nothing inspects the text or reports more than it (no stop strings, parsers, chat
        #: format, logprobs or token ids): :meth:`push` takes its short path.
        self._plain = (
            stops is None
            and reasoning is None
            and tool_parser is None
            and reader is None
            and token_piece is None
            and not keep_token_ids
        )

    @property
    def watches_stops(self) -> bool:
        """True when this choice has stop strings to match."""
        return self._stops is not None

    @property
    def reports_logprobs(self) -> bool:
        """True when this choice's deltas carry logprobs (it reads the chunks' logprobs)."""
        return self._token_piece is not None

    @property
    def stopped_early(self) -> bool:
        """True once a stop string matched here (further tokens are ignored)."""
        return self.matched_stop is not None

    def push(self, token_ids: Sequence[int], logprobs: Any = None) -> ChoiceDelta | None:
        """Process new token ids (and their logprobs, an ``OutputLogProbs`` message)."""
        if self.done or self.matched_stop is not None:
            return None
        if self._plain:  # text in, content out: the steps below that apply, inline
            if token_ids and token_ids[-1] in self._hidden_stop_ids:
                text = self._decoder.push(token_ids[:-1]) if len(token_ids) > 1 else ""
            else:
                text = self._decoder.push(token_ids) if token_ids else ""
            self.tokens += len(token_ids)
            if not text:
                return None
            self._normal_chars += len(text)
            # Positional: ChoiceDelta(self.index, text, completion_tokens=...), a third cheaper.
            return ChoiceDelta(self.index, text, "", (), None, None, self.tokens)
        if self._reader is not None:
            return self._push_read(token_ids, logprobs)
        visible = token_ids
        if token_ids and token_ids[-1] in self._hidden_stop_ids:
            visible = token_ids[:-1]  # EOS / stop token: ends the output, not part of its text
        # Several tokens at once may run past a stop string: replaying them one by one on a
        # copy finds the token that completed it, where the output ends (as in streaming).
        # (A hidden EOS after the stop counts too: it must not be counted when the stop ended
        # the output before it.)
        before = self._decoder.fork() if self._stops is not None and len(token_ids) > 1 else None
        text = self._decoder.push(visible) if visible else ""
        delta = ChoiceDelta(self.index)
        if text and self._stops is not None:
            decoded = len(text)
            text, matched = self._stops.push(text)
            if matched is not None:
                self.matched_stop = matched
                if before is not None:
                    used = _tokens_for(before, visible, decoded - self._stops.overshoot)
                    token_ids = token_ids[:used]
        self.tokens += len(token_ids)
        delta.completion_tokens = self.tokens
        if logprobs is not None and self._token_piece is not None:
            # Logprobs cover the tokens the answer shows: a hidden stop token is left out,
            # unless asked for (``/generate``, whose output ids include it).
            shown = len(token_ids)
            if not self._stop_token_logprobs:
                shown = min(shown, len(visible))
            delta.logprobs = self._logprobs(logprobs, shown) or None
        if self._keep_token_ids:
            # The stream driver hands each push a list of its own (a slice of the worker's
            # ids), which the delta keeps; the decoder copies what it needs.
            delta.token_ids = token_ids if isinstance(token_ids, list) else list(token_ids)
        self._route(text, delta)
        if self.matched_stop is not None:
            self._flush(delta)
        return None if delta.is_empty() else delta

    def finish(
        self,
        finish_reason: str,
        matched: str | int | None,
        completion_tokens: int | None = None,
        reasoning_tokens: int = 0,
    ) -> tuple[ChoiceDelta | None, ChoiceEnd]:
        """End of this choice: flush everything held and describe how it ended.

        ``reasoning_tokens`` is the worker's count (SGLang counts them when asked with
        ``require_reasoning``); when it has none, turnout estimates it from the text.
        """
        delta = ChoiceDelta(self.index)
        if self._reader is not None and not self.done:
            if not self._read(delta):  # it failed at the end: what the decoder holds is content
                self._emit(self._decoder.finish(), delta)
        elif not self.done and self.matched_stop is None:
            text = self._decoder.finish()
            if self._stops is not None:
                text, hit = self._stops.push(text)
                if hit is not None:
                    self.matched_stop = hit
                else:
                    text += self._stops.finish()
            self._route(text, delta)
            self._flush(delta, truncated=finish_reason == "length")
        if self._held_space and not self.calls:
            delta.content += self._held_space
        self._held_space = ""
        if self.matched_stop is not None:
            finish_reason, matched = "stop", self.matched_stop
        if finish_reason == "stop" and self.calls:
            finish_reason = "tool_calls"
        self.done = True
        # Turnout's own stop ends the count where the text ends, whatever the worker produced.
        tokens = self.tokens
        if completion_tokens is not None and self.matched_stop is None:
            tokens = completion_tokens
        delta.completion_tokens = tokens
        reasoning = reasoning_tokens or self._estimated_reasoning_tokens(tokens)
        end = ChoiceEnd(self.index, finish_reason, matched, tokens, reasoning)
        return (None if delta.is_empty() else delta), end

    def _push_read(self, token_ids: Sequence[int], logprobs: Any) -> ChoiceDelta | None:
        """:meth:`push` through the chat format's reader (stop tokens included: they end its
        messages)."""
        delta = ChoiceDelta(self.index)
        self.tokens += len(token_ids)
        delta.completion_tokens = self.tokens
        if logprobs is not None and self._token_piece is not None:
            shown = len(token_ids)
            if shown and token_ids[-1] in self._hidden_stop_ids and not self._stop_token_logprobs:
                shown -= 1  # the stop token ends the output: no logprob of its own
            delta.logprobs = self._logprobs(logprobs, shown) or None
        if self._keep_token_ids:
            delta.token_ids = list(token_ids)
        self._read(delta, token_ids)
        return None if delta.is_empty() else delta

    def _read(self, delta: ChoiceDelta, token_ids: Sequence[int] | None = None) -> bool:
        """Add what the reader makes of the next tokens (``None``: of the end) to ``delta``. A
        reader that fails is dropped (False): these tokens and the rest are decoded as plain
        content."""
        reader = self._reader
        assert reader is not None
        try:
            pieces = reader.finish() if token_ids is None else reader.feed(token_ids)
        except Exception as exc:
            self._parser_failed("chat format", exc)
            if token_ids is not None:
                visible = [t for t in token_ids if t not in self._hidden_stop_ids]
                self._emit(self._decoder.push(visible), delta)
            return False
        for piece in pieces:
            if piece.kind == "call" and self._reader_calls:
                assert piece.call is not None
                self._add_calls([ToolCallDelta(piece.call, piece.name, piece.text)], delta)
            elif piece.kind == "reasoning" and self._reader_reasoning:
                delta.reasoning += piece.text
                self._reasoning_chars += len(piece.text)
            else:
                self._normal_chars += len(piece.text)
                self._emit(piece.text, delta)
        return True

    def reasoning_tokens(self, counted: int) -> int:
        """The reasoning tokens so far: ``counted`` (the worker's count), else the estimate."""
        return counted or self._estimated_reasoning_tokens(self.tokens)

    def _estimated_reasoning_tokens(self, tokens: int) -> int:
        """The tokens' share of reasoning by characters: the same however the output was
        chunked (the parsers release the same text whatever the chunking)."""
        reasoning, normal = self._reasoning_chars, self._normal_chars
        if not reasoning:
            return 0
        return round(tokens * reasoning / (reasoning + normal))

    def _parser_name(self, which: str) -> str:
        """The name of the ``tool``, ``reasoning`` or ``chat format`` parser (its registered
        name, else its class name)."""
        tool, reasoning, reader = self._parser_names
        if which == "tool":
            return tool or type(self._tool_parser).__name__
        if which == "reasoning":
            return reasoning or type(self._reasoning).__name__
        return reader or type(self._reader).__name__

    def _parser_failed(self, which: str, exc: Exception) -> None:
        # The boundary between turnout and a (maybe third-party) parser: the failure becomes a
        # ParserError naming the parser. A broken parser must not break the answer: log it once,
        # count it, and let the rest of this output pass through as plain text.
        error = ParserError(which, self._parser_name(which), exc)
        log.error("%s; the rest of this output passes through unparsed", error, exc_info=exc)
        note_parser_error(error)
        if which == "reasoning":
            self._reasoning = None
        elif which == "tool":
            self._tool_parser = None
        else:
            self._reader = None

    def _route(self, text: str, delta: ChoiceDelta) -> None:
        if not text:
            return
        normal = text
        if self._reasoning is not None:
            try:
                step = self._reasoning.parse_incremental(text)
            except Exception as exc:
                self._parser_failed("reasoning", exc)
                self._content(text, delta)
                return
            delta.reasoning += step.reasoning_text
            normal = step.normal_text
            self._reasoning_chars += len(step.reasoning_text)
        self._normal_chars += len(normal)
        self._content(normal, delta)

    def _content(self, text: str, delta: ChoiceDelta) -> None:
        if not text:
            return
        if self._tool_parser is None:
            self._emit(text, delta)
            return
        try:
            step = self._tool_parser.parse_incremental(text, self._tools)
        except Exception as exc:
            self._parser_failed("tool", exc)
            self._emit(text, delta)
            return
        self._emit(step.normal_text, delta)
        self._add_calls(step.calls, delta)

    def _emit(self, text: str, delta: ChoiceDelta) -> None:
        """Add normal text to the content; with tools, hold its trailing whitespace back."""
        if not text:
            return
        if not self._holds_space:
            delta.content += text
            return
        body = text.rstrip()
        if not body:
            self._held_space += text
            return
        delta.content += self._held_space + body
        self._held_space = text[len(body) :]

    def _flush(self, delta: ChoiceDelta, truncated: bool = False) -> None:
        if self._reasoning is not None:
            try:
                step = self._reasoning.finish()
            except Exception as exc:
                self._parser_failed("reasoning", exc)
            else:
                delta.reasoning += step.reasoning_text
                self._reasoning_chars += len(step.reasoning_text)
                self._normal_chars += len(step.normal_text)
                self._content(step.normal_text, delta)
        if self._tool_parser is not None:
            try:
                step_t = self._tool_parser.finish(truncated=truncated)
            except Exception as exc:
                self._parser_failed("tool", exc)
            else:
                self._emit(step_t.normal_text, delta)
                self._add_calls(step_t.calls, delta)

    def _add_calls(self, calls: Sequence[ToolCallDelta], delta: ChoiceDelta) -> None:
        if not calls:
            return
        pieces = list(delta.tool_calls)
        for call in calls:
            if self._max_calls is not None and call.index >= self._max_calls:
                continue
            call_id = None
            if call.name is not None:
                call_id = self._call_ids.make(call.index, call.name)
                self.calls = max(self.calls, call.index + 1)
            pieces.append(ToolCallPiece(call.index, call_id, call.name, call.arguments))
        if pieces:
            delta.tool_calls = pieces

    def _logprobs(self, logprobs: Any, limit: int) -> list[TokenLogprob]:
        """The first ``limit`` tokens' logprobs (an ``OutputLogProbs`` message)."""
        assert self._token_piece is not None
        piece = self._token_piece
        entries: list[TokenLogprob] = []
        tops = list(logprobs.top_logprobs)
        wanted_rows = list(logprobs.token_ids_logprobs)
        for i, (token_id, value) in enumerate(
            zip(logprobs.token_ids[:limit], logprobs.token_logprobs, strict=False)
        ):
            top: list[TokenLogprob] = []
            if i < len(tops):
                alternatives: Iterable[tuple[int, float]] = zip(
                    tops[i].token_ids, tops[i].values, strict=False
                )
                if self._top_logprobs is not None:
                    alternatives = itertools.islice(alternatives, self._top_logprobs)
                for top_id, top_value in alternatives:
                    top_text, top_raw = piece(top_id)
                    top.append(TokenLogprob(top_id, top_text, top_value, raw=top_raw))
            text, raw = piece(token_id)
            entry = TokenLogprob(token_id, text, value, top, raw)
            if i < len(wanted_rows):
                row = wanted_rows[i]
                for wanted_id, wanted_value in zip(row.token_ids, row.values, strict=False):
                    wanted_text, wanted_raw = piece(wanted_id)
                    entry.wanted.append(
                        TokenLogprob(wanted_id, wanted_text, wanted_value, raw=wanted_raw)
                    )
            entries.append(entry)
        return entries


def _tokens_for(decoder: TextDecoder, token_ids: Sequence[int], chars: int) -> int:
    """How many of ``token_ids``, pushed one by one into ``decoder``, release ``chars``
    characters (all of them when they never do)."""
    released = 0
    for count, token_id in enumerate(token_ids, 1):
        released += len(decoder.push((token_id,)))
        if released >= chars:
            return count
    return len(token_ids)
