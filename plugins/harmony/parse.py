"""gpt-oss output tokens read by ``openai-harmony`` into reasoning, content and tool calls.

Harmony messages after the prompt's ``<|start|>assistant``: ``analysis`` bodies are reasoning;
``final`` bodies, and ``commentary`` bodies without a recipient (preambles), are content; a
message addressed to ``functions.NAME`` is a call to ``NAME`` whose body is the arguments (other
recipients keep their whole name, e.g. ``browser.search``). An output cut off inside a message
keeps what was said (``process_eos``). Tokens harmony cannot read (a malformed header, a stray
``<|end|>``) end the structured part: from there on everything is plain content, including an
unfinished header that was never shown.

:class:`HarmonyStream` emits :class:`HarmonyDelta`\\ s as tokens arrive; :func:`parse_output`
folds the same deltas, so streaming and one-shot parsing agree however the tokens are chunked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from openai_harmony import HarmonyEncoding, HarmonyError, Role, StreamableParser, StreamState

from turnout.chat_formats.types import FormatDelta

__all__ = ["HarmonyCall", "HarmonyDelta", "HarmonyOutput", "HarmonyStream", "parse_output"]

_FUNCTIONS = "functions."


#: A piece of output: reasoning, content, or a call's arguments (the chat format API's type).
HarmonyDelta = FormatDelta


@dataclass(frozen=True, slots=True)
class HarmonyCall:
    """One tool call: the function name and the arguments text, as the model wrote them."""

    name: str
    arguments: str


@dataclass
class HarmonyOutput:
    """A whole output, folded."""

    reasoning: str = ""
    content: str = ""
    calls: list[HarmonyCall] = field(default_factory=list)

    def add(self, delta: HarmonyDelta) -> None:
        """Fold one delta in."""
        if delta.kind == "reasoning":
            self.reasoning += delta.text
        elif delta.kind == "content":
            self.content += delta.text
        else:
            assert delta.call is not None
            if delta.call == len(self.calls):
                self.calls.append(HarmonyCall(delta.name or "", ""))
            call = self.calls[delta.call]
            self.calls[delta.call] = HarmonyCall(call.name, call.arguments + delta.text)


class HarmonyStream:
    """Incremental reader of one gpt-oss output (one per choice)."""

    def __init__(self, encoding: HarmonyEncoding) -> None:
        self._encoding = encoding
        self._parser = StreamableParser(encoding, Role.ASSISTANT)
        self._calls = 0
        self._open_call: int | None = None  # the call whose arguments are streaming
        self._message_tokens: list[int] = []  # tokens of the message being read
        self._shown = False  # whether any of that message's body was emitted
        self._broken = False  # harmony gave up: the rest is plain content
        self._pending: list[int] = []  # plain tokens whose bytes do not end a character yet

    def feed(self, token_ids: Iterable[int]) -> list[HarmonyDelta]:
        """Deltas for the next output tokens."""
        deltas: list[HarmonyDelta] = []
        for token in token_ids:
            if self._broken:
                self._plain([token], deltas)
                continue
            parser = self._parser
            done = len(parser.messages)
            self._message_tokens.append(token)
            try:
                parser.process(token)
            except HarmonyError:
                self._break(deltas)
                continue
            delta = parser.last_content_delta
            if delta:
                self._emit(delta, parser.current_channel, parser.current_recipient, deltas)
            if len(parser.messages) > done or parser.state == StreamState.EXPECT_START:
                self._message_tokens.clear()
                self._shown = False
                self._open_call = None
        return deltas

    def finish(self) -> list[HarmonyDelta]:
        """Deltas for the end of the output (an unfinished message is kept)."""
        deltas: list[HarmonyDelta] = []
        if not self._broken:
            try:
                self._parser.process_eos()
            except HarmonyError:
                self._break(deltas, at_end=True)
        if self._pending:
            deltas.append(HarmonyDelta("content", self._encoding.decode(self._pending)))
            self._pending = []
        return deltas

    def _emit(
        self, text: str, channel: str | None, recipient: str | None, deltas: list[HarmonyDelta]
    ) -> None:
        self._shown = True
        if recipient and recipient != "assistant":
            name = recipient[len(_FUNCTIONS) :] if recipient.startswith(_FUNCTIONS) else recipient
            if self._open_call is None:
                self._open_call = self._calls
                self._calls += 1
                deltas.append(HarmonyDelta("call", text, self._open_call, name))
            else:
                deltas.append(HarmonyDelta("call", text, self._open_call))
        elif channel == "analysis":
            deltas.append(HarmonyDelta("reasoning", text))
        else:
            deltas.append(HarmonyDelta("content", text))

    def _break(self, deltas: list[HarmonyDelta], at_end: bool = False) -> None:
        """Harmony cannot go on: the message's unshown tokens (its header) become content."""
        self._broken = True
        unshown = self._message_tokens if not self._shown else self._message_tokens[-1:]
        if at_end and self._shown:
            unshown = []
        self._plain(unshown, deltas)
        self._message_tokens = []

    def _plain(self, tokens: Sequence[int], deltas: list[HarmonyDelta]) -> None:
        for token in tokens:  # token by token: the same text however the output is chunked
            self._pending.append(token)
            try:
                text = self._encoding.decode_utf8(self._pending)
            except Exception:  # not a whole character yet (the binding's error type)
                continue
            self._pending = []
            if text:
                deltas.append(HarmonyDelta("content", text))


def parse_output(encoding: HarmonyEncoding, token_ids: Sequence[int]) -> HarmonyOutput:
    """The whole output at once (the same deltas as streaming, folded)."""
    stream = HarmonyStream(encoding)
    out = HarmonyOutput()
    for delta in [*stream.feed(token_ids), *stream.finish()]:
        out.add(delta)
    return out
