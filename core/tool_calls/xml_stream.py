"""One streaming state machine for every XML / key-value tool-call format.

The formats differ only in their tags (:class:`XmlSyntax`): a *block* (``<tool_call>`` …
``</tool_call>``) holds one or more *invokes* (``<function=NAME>`` / ``<invoke name="NAME">``)
which hold *parameters* (``<parameter=KEY>VALUE</parameter>``). :class:`XmlToolParser` runs the
machine; ``parse_complete`` feeds the whole text to a fresh machine, so the streaming and one-shot
results are identical by construction for any chunking.

Rules shared by every XML-family parser (each parser module documents its tags):

* **Normal text** before, between and after blocks is kept exactly, except that whitespace
  between a block of calls and the next block start is a separator (Qwen writes ``\n`` between
  parallel ``<tool_call>`` blocks). Whitespace and separator tokens between invokes of a block
  are format, not text. Stray text inside a block after its first invoke is normal text; stray
  text right after the block start means the block start was prose: everything is text.
* **Announcing.** A call is announced (name delta) as soon as its name is complete and allowed.
  From then on it is a call, whatever follows: a call cut off at end of output is closed with
  the parameters seen so far (a value cut off is taken as it stands), and a missing invoke end
  tag is tolerated when the block end arrives.
* **Not a call.** A block start whose invoke header is malformed (no name, a name with spaces
  or tag characters, a header longer than :data:`HEADER_LIMIT`) and an invoke whose name is not
  among the request's tools stay in the normal text verbatim — the block tags too when the block
  produced no call; an unknown invoke after a call in the same block keeps only its own text.
* **Arguments** are a JSON object built parameter by parameter (:mod:`turnout.tool_calls
  .xml_params`): ``{"k1": v1, "k2": v2}`` (keys in the model's order; a repeated key is repeated).
  Values of string parameters (by schema, or by the format's ``string="true"``) are streamed as
  they arrive; other values once complete. Values are verbatim, except that formats with
  :attr:`XmlSyntax.trim_newlines` drop one ``\n`` after the opening and one before the closing
  tag. Text inside an invoke that is not a parameter is ignored; a parameter whose header is
  malformed, or a GLM key without its value, is dropped.
* **Cost.** Text is scanned once; held-back text is bounded by the longest tag plus the header
  limit, so the cost per delta does not grow with the length of the output.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from turnout.tool_calls.markers import find_first_marker
from turnout.tool_calls.names import is_allowed, tool_names
from turnout.tool_calls.types import (
    CallIdStyle,
    ToolCallDelta,
    ToolParseResult,
    ToolParseStep,
    Tools,
    fold_steps,
)
from turnout.tool_calls.xml_params import (
    ParamSchema,
    function_schemas,
    is_string_param,
    strict_json,
    string_json,
    trim_value,
    value_json,
)

#: Longest invoke or parameter header (between its start tag and its end) accepted, in characters.
HEADER_LIMIT = 256

_PLAIN_NAME = re.compile(r"[^\s<>\"'=]+")
#: Every beginning of a bare-name header (``PLAIN_NAME_PREFIX`` for :attr:`XmlSyntax.name_prefix`).
PLAIN_NAME_PREFIX = re.compile(r"\s*[^\s<>\"'=]*\s*")
_ATTR_NAME = re.compile(r"\s+name\s*=\s*\"([^\"<>]+)\"\s*")
_ATTR_KEY_STRING = re.compile(
    r"\s+name\s*=\s*\"([^\"<>]+)\"(?:\s+string\s*=\s*\"(true|false)\")?\s*"
)

#: A parsed parameter header: the key and the format's own string flag (``None``: use the schema).
ParamHeader = tuple[str, bool | None]


def plain_name(header: str) -> str | None:
    """Name written bare (``<function=NAME>``, GLM's ``<tool_call>NAME``), space around ignored."""
    name = header.strip()
    return name if _PLAIN_NAME.fullmatch(name) else None


def attr_name(header: str) -> str | None:
    """Name written as an attribute: `` name="NAME"``."""
    match = _ATTR_NAME.fullmatch(header)
    if match is None:
        return None
    return match.group(1).strip() or None


def plain_key(header: str) -> ParamHeader | None:
    """Key written bare (``<parameter=KEY>``, ``<arg_key>KEY</arg_key>``)."""
    key = header.strip()
    return (key, None) if key and "<" not in key and ">" not in key else None


def attr_key(header: str) -> ParamHeader | None:
    """Key written as an attribute: `` name="KEY"``."""
    match = _ATTR_NAME.fullmatch(header)
    return (match.group(1), None) if match else None


def attr_key_string(header: str) -> ParamHeader | None:
    """DSML key: `` name="KEY" string="true|false"`` (the flag is optional)."""
    match = _ATTR_KEY_STRING.fullmatch(header)
    if match is None:
        return None
    flag = match.group(2)
    return match.group(1), None if flag is None else flag == "true"


@dataclass(frozen=True, slots=True)
class XmlSyntax:
    """The tags of one XML / key-value format."""

    #: Opens a block of calls in normal text.
    block_start: str
    #: Closes the block.
    block_end: str
    #: Opens an invoke inside a block; ``None`` when the name follows the block start (GLM).
    invoke_start: str | None
    #: Closes an invoke; ``None`` when the block end closes it (GLM).
    invoke_end: str | None
    #: Ends the invoke header and is consumed (``">"``); ``None`` if only lookaheads end it.
    name_end: str | None
    #: Parses the invoke header into the function name (``None``: malformed).
    parse_name: Callable[[str], str | None]
    #: Opens a parameter; its header runs up to ``key_end``.
    param_start: str
    key_end: str
    #: Parses the parameter header into the key and the format's string flag.
    parse_key: Callable[[str], ParamHeader | None]
    #: Closes a parameter value.
    param_end: str
    #: Ends the invoke header without being consumed (GLM: ``<arg_key>``, the block end).
    name_lookahead: tuple[str, ...] = ()
    #: Matches every beginning of a valid invoke header (early rejection of prose).
    name_prefix: re.Pattern[str] | None = None
    #: Tag that must follow the key before the value (GLM: ``<arg_value>``).
    value_start: str | None = None
    #: Other tags that end a value without being consumed (a forgotten ``</parameter>``).
    value_ends: tuple[str, ...] = ()
    #: Tokens between invokes that are format, not text (Step-3's call tokens).
    separators: tuple[str, ...] = ()
    #: ``(start, end)`` regions of normal text in which blocks are not recognised.
    opaque: tuple[tuple[str, str], ...] = ()
    #: An invoke body may be one bare JSON object instead of parameters (DSML).
    json_body: bool = False
    #: Values sit on their own lines: one line break after the opening tag and one before the
    #: closing tag are dropped (:func:`~turnout.tool_calls.xml_params.trim_value`).
    trim_newlines: bool = False

    # Derived tag sets, filled in __post_init__.
    text_markers: tuple[str, ...] = field(init=False)
    block_markers: tuple[str, ...] = field(init=False)
    header_ends: tuple[str, ...] = field(init=False)
    body_markers: tuple[str, ...] = field(init=False)
    value_markers: tuple[str, ...] = field(init=False)
    pass_markers: tuple[str, ...] = field(init=False)
    json_body_markers: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        def put(name: str, tags: tuple[str | None, ...]) -> None:
            object.__setattr__(self, name, tuple(dict.fromkeys(t for t in tags if t)))

        put("text_markers", (self.block_start, *(start for start, _ in self.opaque)))
        put("block_markers", (self.invoke_start, self.block_end, *self.separators))
        put("header_ends", (self.name_end, *self.name_lookahead))
        put("body_markers", (self.param_start, self.invoke_end, self.block_end))
        put("value_markers", (self.param_end, *self.value_ends))
        put("pass_markers", (self.invoke_end, self.block_end))
        put("json_body_markers", (self.invoke_end, self.block_end))


class _S(enum.Enum):
    TEXT = enum.auto()  # normal text, looking for a block start
    OPAQUE = enum.auto()  # normal text inside an opaque region
    BLOCK = enum.auto()  # inside a block, between invokes
    HEADER = enum.auto()  # reading an invoke header (the name)
    BODY = enum.auto()  # inside an announced call, between parameters
    KEY = enum.auto()  # reading a parameter header
    VALUE_OPEN = enum.auto()  # waiting for the value start tag
    VALUE = enum.auto()  # reading a parameter value
    JSON_BODY = enum.auto()  # reading a bare JSON invoke body
    PASS = enum.auto()  # an invoke that is not a call: copied to normal text


_WS = " \t\r\n"
_Header = tuple[str, str]
_WAIT: _Header = ("", "wait")
_BAD: _Header = ("", "bad")


class _Machine:
    """The state machine for one output. ``feed`` and ``finish`` return what they released."""

    def __init__(self, syntax: XmlSyntax, tools: Tools) -> None:
        self.syn = syntax
        self.names = tool_names(tools)
        self.schemas = function_schemas(tools)
        self.opaque_ends = dict(syntax.opaque)
        self._partial_info: dict[tuple[str, ...], tuple[int, str]] = {}
        self.buf = ""
        self.pos = 0
        self.state = _S.TEXT
        self.text: list[str] = []
        self.deltas: list[ToolCallDelta] = []
        self.pending: list[str] = []  # format text held until we know whether it is a call
        self.stray = False  # inside BLOCK/BODY: skipping text up to the next tag
        self.gap = False  # TEXT right after a block of calls: whitespace may be a separator
        self.block_calls = 0
        self.block_invokes = 0
        self.opaque_end = ""
        self.n_calls = 0
        # The current call and parameter.
        self.call_schemas: Mapping[str, ParamSchema] = {}
        self.args_open = False
        self.args_done = False
        self.key = ""
        self.key_flag: bool | None = None
        self.streaming_value = False
        self.lead = False
        self.held = ""
        self.acc: list[str] = []
        self.handlers: dict[_S, Callable[[], bool]] = {
            _S.TEXT: self._text_state,
            _S.OPAQUE: self._opaque_state,
            _S.BLOCK: self._block_state,
            _S.HEADER: self._header_state,
            _S.BODY: self._body_state,
            _S.KEY: self._key_state,
            _S.VALUE_OPEN: self._value_open_state,
            _S.VALUE: self._value_state,
            _S.JSON_BODY: self._json_body_state,
            _S.PASS: self._pass_state,
        }

    # -- driving --------------------------------------------------------------------------

    def feed(self, delta: str) -> ToolParseStep:
        self.buf = self.buf[self.pos :] + delta if self.pos else self.buf + delta
        self.pos = 0
        handlers = self.handlers
        while handlers[self.state]():
            pass
        return self._take()

    def finish(self) -> ToolParseStep:
        while self.handlers[self.state]():
            pass
        state = self.state
        rest = self.buf[self.pos :]
        if state is _S.VALUE:  # a closing tag cut off by the end of output is not value
            rest = rest[: len(rest) - self._partial(self.syn.value_markers)]
        self.buf, self.pos = "", 0
        if state in (_S.TEXT, _S.OPAQUE, _S.PASS):
            self._release_pending()
            self._emit(rest)
        elif state is _S.BLOCK:
            if self.block_calls == 0:
                self._release_pending()
                self._emit(rest)
            elif self.stray:
                self._emit(rest)
        elif state is _S.HEADER:
            self._release_pending()
            self._emit(rest)
        elif state is _S.VALUE:
            self._end_value(rest)
            self._close_call()
        elif state is _S.JSON_BODY:
            self._end_json_body(rest)
            self._close_call()
        else:  # BODY, KEY, VALUE_OPEN: the call is announced; close it
            self._close_call()
        self.state = _S.TEXT
        self.gap = False
        return self._take()

    # -- output ---------------------------------------------------------------------------

    def _take(self) -> ToolParseStep:
        step = ToolParseStep("".join(self.text), self.deltas)
        self.text = []
        self.deltas = []
        return step

    def _emit(self, text: str) -> None:
        if text:
            self.text.append(text)

    def _release_pending(self) -> None:
        self.text.extend(self.pending)
        self.pending = []

    def _args(self, text: str) -> None:
        index = self.n_calls - 1
        if self.deltas and self.deltas[-1].index == index:
            last = self.deltas[-1]
            self.deltas[-1] = ToolCallDelta(index, last.name, last.arguments + text)
        else:
            self.deltas.append(ToolCallDelta(index, None, text))

    # -- scanning helpers -----------------------------------------------------------------

    def _find(self, markers: tuple[str, ...]) -> tuple[int, str] | None:
        return find_first_marker(self.buf, markers, self.pos)

    def _partial(self, markers: tuple[str, ...]) -> int:
        """Length of the buffer's tail that may still become one of ``markers``.

        Same answer as :func:`~turnout.tool_calls.markers.partial_marker_suffix`, but only the
        positions holding a marker's first character are tried (usually none), so the cost per
        delta stays small and flat.
        """
        buf = self.buf
        size = len(buf)
        info = self._partial_info.get(markers)
        if info is None:
            info = (max(len(m) for m in markers), "".join(dict.fromkeys(m[0] for m in markers)))
            self._partial_info[markers] = info
        longest, firsts = info
        start = max(self.pos, size - longest + 1)
        for i in range(start, size):
            if buf[i] in firsts:
                tail = buf[i:]
                for marker in markers:
                    if len(marker) > size - i and marker.startswith(tail):
                        return size - i
        return 0

    def _release_until(self, markers: tuple[str, ...]) -> tuple[str, tuple[int, str] | None]:
        """Text up to the first marker (then ``pos`` stays on it) or up to a possible prefix."""
        hit = self._find(markers)
        end = hit[0] if hit is not None else len(self.buf) - self._partial(markers)
        chunk = self.buf[self.pos : end]
        self.pos = end
        return chunk, hit

    def _skip_ws(self) -> str:
        buf, start = self.buf, self.pos
        end = start
        while end < len(buf) and buf[end] in _WS:
            end += 1
        self.pos = end
        return buf[start:end]

    def _tag_here(self, markers: tuple[str, ...]) -> str | None:
        """The marker starting at ``pos``; ``""`` if the rest may still become one; else None."""
        rest_len = len(self.buf) - self.pos
        found: str | None = None
        for marker in markers:
            if self.buf.startswith(marker, self.pos):
                if found is None or len(marker) > len(found):
                    found = marker
            elif rest_len < len(marker) and marker.startswith(self.buf[self.pos :]):
                return ""
        return found

    def _header(self, ends: tuple[str, ...], prefix: re.Pattern[str] | None) -> _Header:
        """The header up to the first of ``ends``: ``(header, end)``, WAIT or BAD.

        ``prefix`` (optional) must match every known beginning of a valid header, so prose after
        a block start is recognised at once instead of after :data:`HEADER_LIMIT` characters.
        """
        hit = self._find(ends)
        if hit is None:
            longest = max(len(e) for e in ends)
            if len(self.buf) - self.pos >= HEADER_LIMIT + longest:
                return _BAD
            if prefix is not None:
                known = self.buf[self.pos : len(self.buf) - self._partial(ends)]
                if prefix.fullmatch(known) is None:
                    return _BAD
            return _WAIT
        if hit[0] - self.pos > HEADER_LIMIT:
            return _BAD
        return self.buf[self.pos : hit[0]], hit[1]

    # -- states ---------------------------------------------------------------------------

    def _text_state(self) -> bool:
        if self.gap:
            # Whitespace between two blocks of calls is a separator; before anything else, text.
            ws = self._skip_ws()
            if ws:
                self.pending.append(ws)
            if self.pos == len(self.buf):
                return False
            tag = self._tag_here((self.syn.block_start,))
            if tag == "":
                return False
            self.gap = False
            if tag is None:
                self._release_pending()
            self.pending = []
            return True
        chunk, hit = self._release_until(self.syn.text_markers)
        self._emit(chunk)
        if hit is None:
            return False
        marker = hit[1]
        self.pos += len(marker)
        if marker in self.opaque_ends:
            self._emit(marker)
            self.opaque_end = self.opaque_ends[marker]
            self.state = _S.OPAQUE
            return True
        self.pending = [marker]
        self.block_calls = self.block_invokes = 0
        self.stray = False
        self.state = _S.BLOCK if self.syn.invoke_start is not None else _S.HEADER
        return True

    def _opaque_state(self) -> bool:
        chunk, hit = self._release_until((self.opaque_end,))
        self._emit(chunk)
        if hit is None:
            return False
        self._emit(self.opaque_end)
        self.pos += len(self.opaque_end)
        self.state = _S.TEXT
        return True

    def _block_state(self) -> bool:
        syn = self.syn
        if self.stray:
            chunk, hit = self._release_until(syn.block_markers)
            self._emit(chunk)
            if hit is None:
                return False
            self.stray = False
            return True
        ws = self._skip_ws()
        if ws:
            self.pending.append(ws)
        if self.pos == len(self.buf):
            return False
        tag = self._tag_here(syn.block_markers)
        if tag == "":
            return False
        if tag is None:
            # Text that is not a tag: prose after a block start, or text between invokes.
            self._release_pending()
            if self.block_invokes == 0:
                self.state = _S.TEXT
            else:
                self.stray = True
            return True
        self.pos += len(tag)
        if tag == syn.block_end:
            self._end_block(tag)
        else:
            self.pending.append(tag)
            if tag == syn.invoke_start:
                self.state = _S.HEADER
        return True

    def _end_block(self, tag: str) -> None:
        if self.block_calls == 0:
            self._release_pending()
            self._emit(tag)
        self.pending = []
        self.gap = self.block_calls > 0
        self.state = _S.TEXT

    def _header_state(self) -> bool:
        syn = self.syn
        found = self._header(syn.header_ends, syn.name_prefix)
        if found is _WAIT:
            return False
        name = None if found is _BAD else syn.parse_name(found[0])
        if name is None:
            self._release_pending()
            self.state = _S.TEXT if self.block_invokes == 0 else _S.BLOCK
            self.stray = self.block_invokes > 0
            return True
        header, end = found
        consumed = len(header) + (len(end) if end == syn.name_end else 0)
        raw = self.buf[self.pos : self.pos + consumed]
        self.pos += consumed
        self.block_invokes += 1
        if is_allowed(name, self.names):
            self.pending = []
            self.block_calls += 1
            self.n_calls += 1
            self.deltas.append(ToolCallDelta(self.n_calls - 1, name, ""))
            self.call_schemas = self.schemas.get(name, {})
            self.args_open = self.args_done = False
            self.stray = False
            self.state = _S.BODY
        else:
            if self.block_calls > 0:
                # After a call, separators belong to the format: keep the invoke's own text only.
                self.pending = self.pending[-1:]
            self.pending.append(raw)
            self._release_pending()
            self.state = _S.PASS
        return True

    def _pass_state(self) -> bool:
        chunk, hit = self._release_until(self.syn.pass_markers)
        self._emit(chunk)
        if hit is None:
            return False
        if hit[1] == self.syn.invoke_end:
            self._emit(hit[1])
            self.pos += len(hit[1])
        self.state = _S.BLOCK
        self.stray = False
        return True

    def _body_state(self) -> bool:
        syn = self.syn
        if self.stray:
            _, hit = self._release_until(syn.body_markers)
            if hit is None:
                return False
            self.stray = False
            return True
        self._skip_ws()
        if self.pos == len(self.buf):
            return False
        tag = self._tag_here(syn.body_markers)
        if tag == "":
            return False
        if tag is None:
            bare_json = syn.json_body and not self.args_open and not self.args_done
            if bare_json and self.buf[self.pos] == "{":
                self.acc = []
                self.state = _S.JSON_BODY
                return True
            self.stray = True
            return True
        self.pos += len(tag)
        if tag == syn.param_start and self.args_done:
            self.stray = True  # parameters after a bare JSON body are ignored
            return True
        if tag == syn.param_start:
            self.state = _S.KEY
            return True
        self._close_call()
        if tag == syn.invoke_end:
            self.pending = []
            self.state = _S.BLOCK
        else:
            self._end_block(tag)
        return True

    def _close_call(self) -> None:
        if not self.args_done:
            self._args("}" if self.args_open else "{}")
        self.args_done = True

    def _key_state(self) -> bool:
        syn = self.syn
        found = self._header((syn.key_end,), None)
        if found is _WAIT:
            return False
        parsed = None if found is _BAD else syn.parse_key(found[0])
        if parsed is None:
            self.state = _S.BODY
            self.stray = True
            return True
        self.pos += len(found[0]) + len(syn.key_end)
        self.key, self.key_flag = parsed
        if syn.value_start is not None:
            self.state = _S.VALUE_OPEN
        else:
            self._start_value()
        return True

    def _value_open_state(self) -> bool:
        assert self.syn.value_start is not None
        self._skip_ws()
        if self.pos == len(self.buf):
            return False
        tag = self._tag_here((self.syn.value_start,))
        if tag == "":
            return False
        if tag is None:
            self.state = _S.BODY
            self.stray = True
            return True
        self.pos += len(tag)
        self._start_value()
        return True

    def _start_value(self) -> None:
        schema = self.call_schemas.get(self.key)
        self.streaming_value = self.key_flag is True or (
            self.key_flag is None and is_string_param(schema)
        )
        prefix = ", " if self.args_open else "{"
        self.args_open = True
        if self.streaming_value:
            self._args(f'{prefix}{string_json(self.key)}: "')
            self.lead = self.syn.trim_newlines
            self.held = ""
        else:
            self._args(f"{prefix}{string_json(self.key)}: ")
            self.acc = []
        self.state = _S.VALUE

    def _value_state(self) -> bool:
        if self.streaming_value and self.lead:
            # One line break right after the opening tag is format, not value.
            if self.pos == len(self.buf):
                return False
            if self.buf[self.pos] == "\n":
                self.pos += 1
            self.lead = False
        chunk, hit = self._release_until(self.syn.value_markers)
        if hit is None:
            if self.streaming_value:
                text = self.held + chunk
                keep = 1 if self.syn.trim_newlines and text.endswith("\n") else 0
                self.held = text[len(text) - keep :]
                self._args(string_json(text[: len(text) - keep])[1:-1])
            else:
                self.acc.append(chunk)
            return False
        if hit[1] == self.syn.param_end:
            self.pos += len(hit[1])
        self._end_value(chunk)
        self.state = _S.BODY
        return True

    def _end_value(self, chunk: str) -> None:
        if self.streaming_value:
            if self.lead:
                text = trim_value(chunk)
            else:
                text = self.held + chunk
                if self.syn.trim_newlines and text.endswith("\n"):
                    text = text[:-1]
            self._args(string_json(text)[1:-1] + '"')
            self.held = ""
            self.lead = False
        else:
            raw = "".join(self.acc) + chunk
            self.acc = []
            if self.syn.trim_newlines:
                raw = trim_value(raw)
            self._args(value_json(raw, self.call_schemas.get(self.key)))

    def _json_body_state(self) -> bool:
        chunk, hit = self._release_until(self.syn.json_body_markers)
        if hit is None:
            self.acc.append(chunk)
            return False
        self._end_json_body(chunk)
        self.state = _S.BODY
        return True

    def _end_json_body(self, chunk: str) -> None:
        text = ("".join(self.acc) + chunk).strip()
        self.acc = []
        self._args(text if _is_json_object(text) else "{}")
        self.args_done = True


def _is_json_object(text: str) -> bool:
    ok, value = strict_json(text)
    return ok and isinstance(value, dict)


class XmlToolParser:
    """Base class of the XML-family parsers: subclasses set :attr:`syntax`."""

    syntax: ClassVar[XmlSyntax]
    call_id_style: ClassVar[CallIdStyle] = "openai"
    needs_special_tokens: ClassVar[bool] = False

    def __init__(self) -> None:
        self._machine: _Machine | None = None

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        """Parse a whole output at once (same machine as streaming, fed in one piece)."""
        machine = _Machine(self.syntax, tools)
        return fold_steps([machine.feed(text), machine.finish()])

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        """Consume the next piece of output; return what can be released now."""
        if self._machine is None:
            self._machine = _Machine(self.syntax, tools)
        return self._machine.feed(delta)

    def finish(self) -> ToolParseStep:
        """End of output: close an announced call, return held text as normal text."""
        if self._machine is None:
            return ToolParseStep()
        return self._machine.finish()
