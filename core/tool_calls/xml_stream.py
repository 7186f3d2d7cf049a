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
* **Releasing.** A call (name and complete arguments, one delta) is released once its invoke has
  ended: at the invoke end tag, or at the block end when the invoke end tag was forgotten. Until
  then its raw text is held: an invoke that is still open when the output ends (or whose bare
  JSON body is not a JSON object) is not a call, and its raw text is normal text. When the
  output was cut off by the token limit (``finish(truncated=True)``) an open invoke whose name
  is known is released with the arguments received so far (not valid JSON).
* **Not a call.** A block start whose invoke header is malformed (no name, a name with spaces
  or tag characters, a header longer than :data:`HEADER_LIMIT`) and an invoke whose name is not
  among the request's tools stay in the normal text verbatim — the block tags too when the block
  produced no call; an unknown invoke after a call in the same block keeps only its own text.
* **Arguments** are a JSON object built parameter by parameter (:mod:`turnout.tool_calls
  .xml_params`): ``{"k1": v1, "k2": v2}`` (keys in the model's order; a repeated key is repeated).
  Values are converted by the format's :class:`~turnout.tool_calls.xml_params.ValueRules`
  (whitespace, entities, inference without a schema) and the tool's schema. Text inside an
  invoke that is not a parameter is ignored; a parameter whose header is malformed, or a GLM
  key without its value, is dropped.
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
    VERBATIM,
    ParamSchema,
    ValueRules,
    function_schemas,
    param_json,
    partial_param_json,
    strict_json,
    string_json,
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
    #: How parameter values are written (whitespace, entities, inference without a schema).
    values: ValueRules = VERBATIM
    #: A literal backslash-n (``\\n``, two characters) between tags counts as a line break (GLM
    #: models sometimes write the separators escaped).
    escaped_newlines: bool = False

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
        # The current call (announced, not yet released) and parameter. ``raw`` holds the
        # call's raw text (what it becomes if it is not a call); ``raw_from`` is where its not
        # yet copied part starts in ``buf`` (``None``: no call open).
        self.call_name = ""
        self.call_args: list[str] = []
        self.raw: list[str] = []
        self.raw_from: int | None = None
        self.call_schemas: Mapping[str, ParamSchema] = {}
        self.args_open = False
        self.args_done = False
        self.bad_body = False
        self.key = ""
        self.key_flag: bool | None = None
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
        if self.raw_from is not None:
            self.raw.append(self.buf[self.raw_from : self.pos])
            self.raw_from = 0
        self.buf = self.buf[self.pos :] + delta if self.pos else self.buf + delta
        self.pos = 0
        handlers = self.handlers
        while handlers[self.state]():
            pass
        return self._take()

    def finish(self, truncated: bool) -> ToolParseStep:
        while self.handlers[self.state]():
            pass
        state = self.state
        if self.raw_from is not None:  # a call is open: released as received, or text
            if truncated:
                self._keep_cut_off_call()
            else:
                self.pos = len(self.buf)
                self._fail_call()
            self.buf, self.pos = "", 0
            self.state = _S.TEXT
            self.gap = False
            return self._take()
        rest = self.buf[self.pos :]
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
        else:  # HEADER: the name never completed
            self._release_pending()
            self._emit(rest)
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
        self.call_args.append(text)

    def _open_call(self, name: str, raw: list[str]) -> None:
        """A call to ``name`` starts (its header, ``raw``, consumed): hold it until it ends."""
        self.call_name = name
        self.call_args = []
        self.raw = raw
        self.raw_from = self.pos
        self.call_schemas = self.schemas.get(name, {})
        self.args_open = self.args_done = self.bad_body = False

    def _call_text(self) -> str:
        """The open call's raw text, up to ``pos``."""
        assert self.raw_from is not None
        return "".join(self.raw) + self.buf[self.raw_from : self.pos]

    def _end_call(self) -> None:
        """The invoke ended (``pos`` after its end): release the call, or its text if broken."""
        if self.bad_body:
            self._fail_call()
            return
        if not self.args_done:
            self._args("}" if self.args_open else "{}")
        self._release_call("".join(self.call_args))

    def _release_call(self, arguments: str) -> None:
        self.deltas.append(ToolCallDelta(self.n_calls, self.call_name, arguments))
        self.n_calls += 1
        self.block_calls += 1
        self.raw, self.raw_from, self.call_args = [], None, []

    def _fail_call(self) -> None:
        """The open call is not a call: its raw text (up to ``pos``) is normal text."""
        self._emit(self._call_text())
        self.raw, self.raw_from, self.call_args = [], None, []

    def _keep_cut_off_call(self) -> None:
        """End of output inside a call (token limit): release it with what was received."""
        state = self.state
        rest = self.buf[self.pos :]
        if state is _S.VALUE:
            rest = rest[: len(rest) - self._partial(self.syn.value_markers)]
            raw = "".join(self.acc) + rest
            schema = self.call_schemas.get(self.key)
            self._args(partial_param_json(raw, schema, self.key_flag, self.syn.values))
        elif state is _S.JSON_BODY:
            self._args(("".join(self.acc) + rest).lstrip())
        self._release_call("".join(self.call_args))

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
        """Skip whitespace between tags (and escaped line breaks, for formats that write them)."""
        buf, start = self.buf, self.pos
        end, size = start, len(buf)
        escaped = self.syn.escaped_newlines
        while end < size:
            if buf[end] in _WS:
                end += 1
            elif escaped and buf.startswith("\\n", end):
                end += 2
            else:
                break
        self.pos = end
        return buf[start:end]

    def _at_end(self) -> bool:
        """Nothing left to decide on: the buffer is used up (or ends in a backslash that may
        start an escaped line break)."""
        rest = len(self.buf) - self.pos
        return rest == 0 or (rest == 1 and self.syn.escaped_newlines and self.buf[-1] == "\\")

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
            if self._at_end():
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
        if self._at_end():
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
            # After a call, separators belong to the format: the invoke's own text only.
            held = self.pending if self.block_calls == 0 else self.pending[-1:]
            self.pending = []
            self._open_call(name, [*held, raw])
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
        if self._at_end():
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
        if tag == syn.param_start:
            self.pos += len(tag)
            if self.args_done:
                self.stray = True  # parameters after a bare JSON body are ignored
            else:
                self.state = _S.KEY
            return True
        if tag == syn.invoke_end:
            self.pos += len(tag)  # the invoke's own end tag is part of its text
            self._end_call()
            self.pending = []
            self.state = _S.BLOCK
        else:  # the block end closes the invoke too
            self._end_call()
            self.pos += len(tag)
            self._end_block(tag)
        return True

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
        if self._at_end():
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
        prefix = ", " if self.args_open else "{"
        self.args_open = True
        self._args(f"{prefix}{string_json(self.key)}: ")
        self.acc = []
        self.state = _S.VALUE

    def _value_state(self) -> bool:
        chunk, hit = self._release_until(self.syn.value_markers)
        if hit is None:
            if chunk:
                self.acc.append(chunk)
            return False
        if hit[1] == self.syn.param_end:
            self.pos += len(hit[1])
        raw = "".join(self.acc) + chunk
        self.acc = []
        schema = self.call_schemas.get(self.key)
        self._args(param_json(raw, schema, self.key_flag, self.syn.values))
        self.state = _S.BODY
        return True

    def _json_body_state(self) -> bool:
        chunk, hit = self._release_until(self.syn.json_body_markers)
        if hit is None:
            if chunk:
                self.acc.append(chunk)
            return False
        text = ("".join(self.acc) + chunk).strip()
        self.acc = []
        if _is_json_object(text):
            self._args(text)
        else:
            self.bad_body = True
        self.args_done = True
        self.state = _S.BODY
        return True


def _is_json_object(text: str) -> bool:
    ok, value = strict_json(text)
    return ok and isinstance(value, dict)


class XmlToolParser:
    """Base class of the XML-family parsers: a subclass sets :attr:`syntax` (its tags) and is a
    complete parser under the rules of this module::

        class AngleCalls(XmlToolParser):
            syntax = XmlSyntax(
                block_start="<calls>", block_end="</calls>",
                invoke_start="<invoke", invoke_end="</invoke>", name_end=">",
                parse_name=attr_name,          # <invoke name="f">
                param_start="<arg", key_end=">", parse_key=attr_key,  # <arg name="k">v</arg>
                param_end="</arg>",
            )

    Values are typed by the tool's JSON schema; :class:`~turnout.tool_calls.ValueRules`
    (``syntax.values``) says how they are written (whitespace, entities, inference).
    """

    syntax: ClassVar[XmlSyntax]
    call_id_style: ClassVar[CallIdStyle] = "openai"
    needs_special_tokens: ClassVar[bool] = False

    def __init__(self) -> None:
        self._machine: _Machine | None = None

    def parse_complete(self, text: str, tools: Tools) -> ToolParseResult:
        """Parse a whole output at once (same machine as streaming, fed in one piece)."""
        machine = _Machine(self.syntax, tools)
        return fold_steps([machine.feed(text), machine.finish(False)])

    def parse_incremental(self, delta: str, tools: Tools) -> ToolParseStep:
        """Consume the next piece of output; return what can be released now."""
        if self._machine is None:
            self._machine = _Machine(self.syntax, tools)
        return self._machine.feed(delta)

    def finish(self, truncated: bool = False) -> ToolParseStep:
        """End of output: return held text as normal text (an open call too, unless the output
        was ``truncated`` by the token limit: then it is released as received)."""
        if self._machine is None:
            return ToolParseStep()
        return self._machine.finish(truncated)
