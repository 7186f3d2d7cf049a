"""HTTP/2 (RFC 9113) on the wire, for both ends turnout speaks: frame types, flags, settings,
error codes, the frame header layout, and building and unpadding frames.

The client connection (:mod:`turnout.wire.http2`) and the simulated worker's server connection
(:mod:`turnout.sim.h2server`) share these.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = [
    "ACK",
    "CONTINUATION",
    "DATA",
    "DEFAULT_FRAME_SIZE",
    "DEFAULT_WINDOW",
    "ENABLE_PUSH",
    "END_HEADERS",
    "END_STREAM",
    "FRAME_HEADER",
    "GOAWAY",
    "HEADERS",
    "HEADER_TABLE_SIZE",
    "INITIAL_WINDOW_SIZE",
    "MAX_CONCURRENT_STREAMS",
    "MAX_FRAME_SIZE",
    "MAX_WINDOW",
    "PADDED",
    "PING",
    "PREFACE",
    "PRIORITY",
    "PRIORITY_FRAME",
    "PUSH_PROMISE",
    "RST_STREAM",
    "SETTING",
    "SETTINGS",
    "STREAM_ID_MASK",
    "U32",
    "WINDOW_UPDATE",
    "ErrorCode",
    "ProtocolError",
    "frame",
    "strip_padding",
]

#: What a client sends first on a connection.
PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# Frame types
DATA: Final = 0x0
HEADERS: Final = 0x1
PRIORITY_FRAME: Final = 0x2
RST_STREAM: Final = 0x3
SETTINGS: Final = 0x4
PUSH_PROMISE: Final = 0x5
PING: Final = 0x6
GOAWAY: Final = 0x7
WINDOW_UPDATE: Final = 0x8
CONTINUATION: Final = 0x9

# Flags
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY: Final = 0x20

# Settings identifiers
HEADER_TABLE_SIZE: Final = 0x1
ENABLE_PUSH: Final = 0x2
MAX_CONCURRENT_STREAMS: Final = 0x3
INITIAL_WINDOW_SIZE: Final = 0x4
MAX_FRAME_SIZE: Final = 0x5

DEFAULT_WINDOW: Final = 65_535
DEFAULT_FRAME_SIZE: Final = 16_384
MAX_WINDOW: Final = 2**31 - 1
#: A stream id is 31 bits; the top bit of the field is reserved.
STREAM_ID_MASK: Final = 2**31 - 1

#: A frame header: the 24-bit length split as byte + short, type, flags, stream id.
FRAME_HEADER: Final = struct.Struct(">BHBBI")
#: One setting of a SETTINGS frame: identifier, value.
SETTING: Final = struct.Struct(">HI")
U32: Final = struct.Struct(">I")


class ErrorCode:
    """HTTP/2 error codes (RFC 9113 §7) that turnout sends or tells apart."""

    NO_ERROR: Final = 0x0
    PROTOCOL_ERROR: Final = 0x1
    INTERNAL_ERROR: Final = 0x2
    FLOW_CONTROL_ERROR: Final = 0x3
    STREAM_CLOSED: Final = 0x5
    FRAME_SIZE_ERROR: Final = 0x6
    REFUSED_STREAM: Final = 0x7
    CANCEL: Final = 0x8
    COMPRESSION_ERROR: Final = 0x9
    ENHANCE_YOUR_CALM: Final = 0xB
    INADEQUATE_SECURITY: Final = 0xC


class ProtocolError(Exception):
    """The peer broke the protocol: the connection ends with ``code`` (a connection error)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def frame(kind: int, flags: int, stream_id: int, payload: bytes | bytearray | memoryview) -> bytes:
    """One frame: header and payload."""
    length = len(payload)
    return FRAME_HEADER.pack(length >> 16, length & 0xFFFF, kind, flags, stream_id) + payload


def strip_padding(payload: bytes | bytearray) -> bytes:
    """The data of a PADDED frame's payload (pad length byte and padding removed)."""
    if not payload:
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "padded frame without pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise ProtocolError(ErrorCode.PROTOCOL_ERROR, "padding exceeds frame")
    return bytes(payload[1 : len(payload) - pad])  # no copy of a bytes slice
