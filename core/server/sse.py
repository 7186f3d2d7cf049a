"""SSE framing: payloads as ``data:`` events (or typed ``event:`` events), the error event of a
stream that fails after it started, the ``[DONE]`` tail and the keep-alive comment.

This layer owns bytes only: which batches there are is the generation's
(:class:`~turnout.generation.flow.PayloadStream`), sending them is the stream answer's
(:class:`~turnout.server.respond.StreamAnswer`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from turnout.errors import ApiError

__all__ = [
    "DONE",
    "KEEPALIVE",
    "sse_batch",
    "sse_error",
    "sse_typed_batch",
    "sse_typed_error",
]

DONE: Final = b"data: [DONE]\n\n"
KEEPALIVE: Final = b": keep-alive\n\n"
_encode = msgspec.json.Encoder().encode


def sse_batch(payloads: Sequence[Any]) -> bytes:
    """Several ``data:`` events as one piece of the body (one write)."""
    if len(payloads) == 1:  # the usual stream step: one event, no list to build and join
        return b"data: " + _encode(payloads[0]) + b"\n\n"
    return b"".join([b"data: " + _encode(payload) + b"\n\n" for payload in payloads])


def sse_error(error: ApiError) -> bytes:
    """The error event sent when a stream fails after it started."""
    return b"data: " + error.to_json() + b"\n\n"


def sse_typed_batch(payloads: Iterable[dict[str, Any]]) -> bytes:
    """Several typed events as one piece of the body: each is named by its payload's ``type``
    (``event: response.output_text.delta``), as OpenAI's Responses API streams them."""
    return b"".join(
        [
            b"event: " + payload["type"].encode() + b"\ndata: " + _encode(payload) + b"\n\n"
            for payload in payloads
        ]
    )


def sse_typed_error(error: ApiError, sequence_number: int) -> bytes:
    """The ``error`` event of a typed stream that fails after it started: the fields of
    OpenAI's error event, and the error object under ``error`` (which clients raise)."""
    detail = error.body()["error"]
    return sse_typed_batch(
        [
            {
                "type": "error",
                "code": detail["code"],
                "message": detail["message"],
                "param": detail["param"],
                "sequence_number": sequence_number,
                "error": detail,
            }
        ]
    )
