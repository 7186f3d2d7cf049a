"""Structured logs: the per-request record (a contextvar), a filter that stamps every log line
with the request id, text or JSON output, and the one access line per request.

Text lines escape control characters: a value a client chose (a path, a worker id) cannot end a
line and forge the next one. JSON lines are safe by construction."""

from __future__ import annotations

import contextvars
import json
import logging
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any

ACCESS_LOGGER = "turnout.access"
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
#: Paths answered often by probes and scrapers: their access lines are logged at debug.
QUIET_PATHS = frozenset({"/health", "/liveness", "/readiness", "/metrics"})


@dataclass(slots=True)
class RequestRecord:
    """What is known about one HTTP request; filled in as it is served, read at its end."""

    method: str
    path: str
    #: The id echoed in ``x-request-id`` and stamped on log lines (set lazily, see ``ensure_id``).
    request_id: str | None = None
    #: True when the id came from the client.
    client_id: bool = False
    started: float = field(default_factory=time.perf_counter)
    status: int | None = None
    #: "ok", or why it ended otherwise: "timeout", "client_gone", "error", "rejected",
    #: "stream_error" (a stream that had started ended with an error event).
    outcome: str = "ok"
    model: str | None = None
    #: The tenant whose key authenticated the request (its name from the config, never the key).
    tenant: str | None = None
    worker: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    attempts: int = 0
    response_started: bool = False
    #: The last piece of the response went out.
    response_complete: bool = False
    #: The response is an event stream (``text/event-stream``).
    event_stream: bool = False
    #: Kind ("tool" or "reasoning") and registered name of the first parser that raised.
    parser_error: tuple[str, str] | None = None
    #: (reason, outcome) of each failover of its answer to another worker (None: none).
    migrations: list[tuple[str, str]] | None = None

    def ensure_id(self, prefix: str = "req") -> str:
        """The request id, generating ``<prefix>-<24 hex>`` when none was given or set yet."""
        if self.request_id is None:
            self.request_id = new_request_id(prefix)
        return self.request_id

    def elapsed(self) -> float:
        """Seconds since the request arrived."""
        return time.perf_counter() - self.started


def new_request_id(prefix: str) -> str:
    """A fresh id like ``chatcmpl-<24 hex>``.

    Unique, not secret (clients may choose their own ids): 96 random bits from the process's
    pseudo-random generator, which Python seeds from the OS per process and again in a forked
    child; no system call per request as with ``secrets``."""
    return f"{prefix}-{random.getrandbits(96):024x}"


def random_suffix() -> str:
    """8 random hex digits (from the same generator as :func:`new_request_id`)."""
    return f"{random.getrandbits(32):08x}"


_CURRENT: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "turnout_request", default=None
)


def current_record() -> RequestRecord | None:
    """The record of the request being served in this context (None outside requests)."""
    return _CURRENT.get()


def enter_request(record: RequestRecord) -> contextvars.Token[RequestRecord | None]:
    """Make ``record`` the current request (until :func:`leave_request` with the token): the
    ``with request_scope`` of a caller that keeps nothing else alive for it."""
    return _CURRENT.set(record)


def leave_request(token: contextvars.Token[RequestRecord | None]) -> None:
    """Restore the current request from before :func:`enter_request` gave ``token``."""
    _CURRENT.reset(token)


class request_scope:
    """Make ``record`` the current request for the code (and tasks started) inside.

    A class rather than a generator context manager: it runs once per request."""

    __slots__ = ("_record", "_token")
    _token: contextvars.Token[RequestRecord | None]

    def __init__(self, record: RequestRecord) -> None:
        self._record = record

    def __enter__(self) -> RequestRecord:
        self._token = _CURRENT.set(self._record)
        return self._record

    def __exit__(self, *exc_info: object) -> None:
        _CURRENT.reset(self._token)


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (or ``-``) to every record, from the current request."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            current = _CURRENT.get()
            record.request_id = (current.request_id if current else None) or "-"
        return True


_STANDARD_ATTRS = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "request_id",
    "fields",
    "color_message",  # uvicorn's ANSI-coloured copy of the message
}


#: Characters that end a line for a log reader (``str.splitlines`` breaks on several of them)
#: or hide text on a terminal, as visible escapes. Tab stays.
_ESCAPES = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if code != 0x09},
    0x0A: "\\n",
    0x0D: "\\r",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}
_ESCAPES_BUT_NEWLINE = {code: text for code, text in _ESCAPES.items() if code != 0x0A}


def escape_controls(text: str) -> str:
    """``text`` on one line: control characters and line separators as escapes."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """``time level logger [request id] message``, one line per record; a traceback follows on
    lines indented by two spaces, so a line that starts in column 0 is always a record."""

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(block: str) -> str:
    return "\n".join("  " + line for line in block.translate(_ESCAPES_BUT_NEWLINE).split("\n"))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request id, extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", "-")
        if request_id != "-":
            data["request_id"] = request_id
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            data.update(fields)
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                data.setdefault(key, value)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def configure_logging(level: str = "info", json_lines: bool = False) -> logging.Handler:
    """Send turnout's and uvicorn's logs to stderr, as text or JSON lines, with request ids.

    Replaces handlers previously installed by this function; returns the new handler.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    handler.set_name("turnout")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "turnout"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    return handler


_access = logging.getLogger(ACCESS_LOGGER)


def log_access(record: RequestRecord, duration_s: float) -> None:
    """The one line per request: id, route, status, tenant, model, worker, tokens, latency."""
    level = logging.DEBUG if record.path in QUIET_PATHS else logging.INFO
    if not _access.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "method": record.method,
        "path": record.path,
        "status": record.status,
        "latency_ms": round(duration_s * 1000, 1),
    }
    text = f"{record.method} {record.path} {record.status} {fields['latency_ms']}ms"
    if record.tenant is not None:
        fields["tenant"] = record.tenant
        text += f" tenant={record.tenant}"
    if record.model is not None:
        fields["model"] = record.model
        fields["worker"] = record.worker
        fields["prompt_tokens"] = record.prompt_tokens
        fields["completion_tokens"] = record.completion_tokens
        text += (
            f" model={record.model} worker={record.worker or '-'}"
            f" tokens={record.prompt_tokens}/{record.completion_tokens}"
        )
        if record.ttft_s is not None:
            fields["ttft_ms"] = round(record.ttft_s * 1000, 1)
            text += f" ttft={fields['ttft_ms']}ms"
        if record.attempts > 1:
            fields["attempts"] = record.attempts
            text += f" attempts={record.attempts}"
    if record.outcome != "ok":
        fields["outcome"] = record.outcome
        text += f" outcome={record.outcome}"
    _access.log(level, text, extra={"fields": fields, "request_id": record.request_id or "-"})
