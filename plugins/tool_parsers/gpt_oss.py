"""gpt-oss (harmony): calls are ``commentary`` messages addressed ``to=functions.NAME``.

An output is a series of harmony messages (the prompt ends with ``<|start|>assistant``)::

    <|channel|>analysis<|message|>…reasoning…<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Paris"}<|call|>

    <|channel|>final<|message|>It is sunny.<|return|>

Behaviour:

* **Content** is the body of ``final`` messages, of ``commentary`` messages without a recipient
  (preambles), and any text outside a message. Harmony tokens (``<|start|>``, ``<|channel|>``,
  ``<|message|>``, ``<|constrain|>``, ``<|end|>``, ``<|return|>``, ``<|call|>``) and message
  headers never reach the content.
* **Reasoning.** ``analysis`` bodies are dropped: they are not content. Normally the gpt-oss
  reasoning parser has already removed them (passing every other byte through).
* **Calls.** A message whose header names a recipient (``to=functions.NAME``, in the role part
  or after the channel; ``<|constrain|>json`` optional) is a call to ``NAME`` (other recipients,
  such as ``to=python``, keep their full name). Its body is the arguments JSON, verbatim; the
  call is released (name and arguments, one delta) once that JSON value is complete, so a call
  is never handed out before it is known to be valid. A blank body gives ``{}``. A body that is
  not a JSON object, that breaks, or that is still open when the message or the output ends is
  not a call: the body is normal text (the output cut off by the token limit is the exception:
  the call is released with the body received so far). Non-blank text after the JSON value is
  normal text.
* **Unknown functions** (a ``tools`` list without the name): not a call; the body is normal text.
* A header longer than :data:`HEADER_LIMIT` characters is not a header (its text is content); a
  header cut off by the end of output is dropped. A message ends at ``<|end|>``, ``<|return|>``,
  ``<|call|>``, or at the next ``<|start|>``/``<|channel|>``.
"""

from __future__ import annotations

import enum
import re
from typing import ClassVar

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

START = "<|start|>"
CHANNEL = "<|channel|>"
MESSAGE = "<|message|>"
CONSTRAIN = "<|constrain|>"
END = "<|end|>"
RETURN = "<|return|>"
CALL = "<|call|>"

#: Longest message header accepted (from ``<|start|>``/``<|channel|>`` to ``<|message|>``).
HEADER_LIMIT = 512

_TOKENS = (START, CHANNEL, MESSAGE, CONSTRAIN, END, RETURN, CALL)
_ENDS = frozenset((END, RETURN, CALL))
_HEADER_STOPS = (MESSAGE, START, END, RETURN, CALL)
_LONGEST = max(len(t) for t in _TOKENS)
_CHANNEL_RE = re.compile(r"<\|channel\|>\s*([^\s<]+)")
_RECIPIENT_RE = re.compile(r"(?:^|[\s>])to=([^\s<]+)")
_WS = " \t\r\n"


class _Body(enum.Enum):
    CONTENT = enum.auto()  # final / preamble / outside messages: normal text
    DROP = enum.auto()  # analysis: reasoning, not content
    ARGS_LEAD = enum.auto()  # call body, before its first non-blank character
    ARGS_JSON = enum.auto()  # call body, inside the JSON value
    ARGS_AFTER = enum.auto()  # call body, after the JSON value (blank text is dropped)


class _Machine:
    """Harmony messages of one output; ``feed`` and ``finish`` return what they released."""

    def __init__(self, tools: Tools) -> None:
        self.names = tool_names(tools)
        self.buf = ""
        self.pos = 0
        self.in_header = False
        self.body = _Body.CONTENT
        self.text: list[str] = []
        self.deltas: list[ToolCallDelta] = []
        self.n_calls = 0
        self.scanner: JsonScanner | None = None
        # The call being read: its name and its body's raw text so far.
        self.call_name = ""
        self.call_raw: list[str] = []
        self.gap = ""

    def feed(self, delta: str) -> ToolParseStep:
        self.buf = self.buf[self.pos :] + delta
        self.pos = 0
        while self._header_state() if self.in_header else self._body_state():
            pass
        return self._take()

    def finish(self, truncated: bool) -> ToolParseStep:
        while self._header_state() if self.in_header else self._body_state():
            pass
        if not self.in_header:  # a header cut off by the end of output is dropped
            self._route(self.buf[self.pos :])
            self._end_message(truncated)
        self.buf, self.pos, self.in_header = "", 0, False
        return self._take()

    # -- output ---------------------------------------------------------------------------

    def _take(self) -> ToolParseStep:
        step = ToolParseStep("".join(self.text), self.deltas)
        self.text = []
        self.deltas = []
        return step

    def _release_call(self, arguments: str) -> None:
        self.deltas.append(ToolCallDelta(self.n_calls, self.call_name, arguments))
        self.n_calls += 1
        self.call_name, self.call_raw, self.scanner = "", [], None

    def _fail_call(self) -> None:
        """The body is not a call's arguments after all: it is normal text."""
        self.text.extend(self.call_raw)
        self.call_name, self.call_raw, self.scanner = "", [], None

    # -- message bodies -------------------------------------------------------------------

    def _body_state(self) -> bool:
        buf = self.buf
        # Every token starts with "<|": skip the marker search when there is none.
        hit = find_first_marker(buf, _TOKENS, self.pos) if "<|" in buf else None
        if hit is None:
            lt = buf.find("<", max(self.pos, len(buf) - _LONGEST + 1))
            end = len(buf) - (partial_marker_suffix(buf[lt:], _TOKENS) if lt >= 0 else 0)
            self._route(buf[self.pos : end])
            self.pos = end
            return False
        at, token = hit
        self._route(buf[self.pos : at])
        self.pos = at + len(token)
        if token in _ENDS:
            self._end_message()
        elif token in (START, CHANNEL):
            self._end_message()
            self.in_header = True
            self.pos = at  # the header is read from its first token
        # a stray <|message|> or <|constrain|> is dropped
        return True

    def _route(self, chunk: str) -> None:
        """Send body text where the current message's body goes."""
        while chunk:
            body = self.body
            if body is _Body.CONTENT:
                self.text.append(chunk)
                return
            if body is _Body.DROP:
                return
            if body is _Body.ARGS_LEAD:
                stripped = chunk.lstrip(_WS)
                self.call_raw.append(chunk[: len(chunk) - len(stripped)])
                if not stripped:
                    return
                if stripped[0] != "{":
                    self._fail_call()
                    self.body = _Body.CONTENT
                else:
                    self.scanner = JsonScanner()
                    self.body = _Body.ARGS_JSON
                chunk = stripped
            elif body is _Body.ARGS_JSON:
                chunk = self._feed_json(chunk)
            else:  # ARGS_AFTER: blank text after the JSON value is dropped
                stripped = chunk.lstrip(_WS)
                if not stripped:
                    self.gap += chunk
                    return
                self.text.append(self.gap + chunk[: len(chunk) - len(stripped)])
                self.gap = ""
                self.body = _Body.CONTENT
                chunk = stripped

    def _feed_json(self, chunk: str) -> str:
        """Feed the call's JSON; return the text after the value (or after it broke)."""
        scanner = self.scanner
        assert scanner is not None
        stop = scanner.feed(chunk)
        self.call_raw.append(chunk[:stop])
        if scanner.status == RUNNING:
            return ""
        if scanner.status == DONE:
            self._release_call(scanner.take())
            self.body = _Body.ARGS_AFTER
        else:
            self._fail_call()
            self.body = _Body.CONTENT
        return chunk[stop:]

    def _end_message(self, truncated: bool = False) -> None:
        """The message ends (its end token, the next header, or the end of output)."""
        if self.body is _Body.ARGS_LEAD:
            self._release_call("{}")  # a blank body: a call without arguments
        elif self.body is _Body.ARGS_JSON:
            if truncated:
                self._release_call("".join(self.call_raw).lstrip(_WS))
            else:
                self._fail_call()
        self.gap = ""
        self.body = _Body.CONTENT

    # -- headers --------------------------------------------------------------------------

    def _header_state(self) -> bool:
        buf, pos = self.buf, self.pos
        # The header starts with its own <|start|> or <|channel|>; look past that token.
        first = START if buf.startswith(START, pos) else CHANNEL
        hit = find_first_marker(buf, _HEADER_STOPS, pos + len(first))
        limit = pos + HEADER_LIMIT
        if (hit is None and len(buf) >= limit + _LONGEST) or (hit is not None and hit[0] > limit):
            # Too long for a header: drop its first token and read the rest as body text.
            self.pos += len(first)
            self.in_header = False
            return True
        if hit is None:
            return False
        at, token = hit
        header = buf[pos:at]
        self.in_header = False
        if token == START:
            self.pos = at  # a new message starts: this header was abandoned
            self.in_header = True
            return True
        self.pos = at + len(token)
        if token == MESSAGE:
            self._open_message(header)
        return True

    def _open_message(self, header: str) -> None:
        recipient = _RECIPIENT_RE.search(header)
        if recipient is not None:
            target = recipient.group(1)
            name = target.removeprefix("functions.")
            if is_allowed(name, self.names):
                self.call_name, self.call_raw = name, []
                self.body = _Body.ARGS_LEAD
            else:
                self.body = _Body.CONTENT
            return
        channel = _CHANNEL_RE.search(header)
        self.body = _Body.DROP if channel and channel.group(1) == "analysis" else _Body.CONTENT


class GptOssToolParser:
    """gpt-oss harmony: ``to=functions.NAME`` messages are calls, ``final`` text is content."""

    call_id_style: ClassVar[CallIdStyle] = "openai"
    needs_special_tokens: ClassVar[bool] = True

    def __init__(self) -> None:
        self._machine: _Machine | None = None

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        """Parse a whole output at once (the streaming machine fed in one piece)."""
        machine = _Machine(tools)
        return fold_steps([machine.feed(text), machine.finish(False)])

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        """Consume the next piece of output; return what can be released now."""
        if self._machine is None:
            self._machine = _Machine(tools)
        return self._machine.feed(delta)

    def finish(self, truncated: bool = False) -> ToolParseStep:
        """End of output: release held text (a call left open is text, unless the output was
        ``truncated`` by the token limit: then it is released as received)."""
        if self._machine is None:
            return ToolParseStep()
        return self._machine.finish(truncated)
