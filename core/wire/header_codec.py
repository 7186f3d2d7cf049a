"""HPACK (RFC 7541) as a gRPC client uses it: cheap to encode and to decode repeated blocks.

Encoding never touches the dynamic table: every field is an indexed static entry or a literal
"without indexing", so the bytes of a field do not depend on what was sent before and are
cached per field. The first block of a connection sets our dynamic table size to 0, which keeps
us within any table size the peer announces later.

Decoding goes through the ``hpack`` package, except for blocks seen before that leave the
dynamic table as it was (indexed fields and literals without indexing): while the table has not
changed, their decoded form is known. A worker answers every call with the same headers and, for
OK calls, the same trailers, which become such blocks once their fields are in its table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import hpack

__all__ = ["HeaderDecoder", "HeaderEncoder", "Headers", "encode_fields"]

Headers = tuple[tuple[str, str], ...]

#: RFC 7541 Appendix A: fields a gRPC client sends, fully indexed (name and value) …
_STATIC_FIELDS: Final = {
    (":method", "GET"): 2,
    (":method", "POST"): 3,
    (":path", "/"): 4,
    (":scheme", "http"): 6,
    (":scheme", "https"): 7,
}
#: … and names whose value varies.
_STATIC_NAMES: Final = {
    ":authority": 1,
    ":method": 2,
    ":path": 4,
    ":scheme": 6,
    "content-type": 31,
    "user-agent": 58,
}
_SIZE_UPDATE_TO_ZERO: Final = b"\x20"
_MAX_CACHED: Final = 512


def _integer(value: int, prefix_bits: int, pattern: int) -> bytes:
    """An HPACK integer with an ``prefix_bits``-bit prefix after the bits of ``pattern``."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([pattern | value])
    out = bytearray([pattern | limit])
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return _integer(len(raw), 7, 0x00) + raw  # H bit 0: no Huffman coding


def encode_field(name: str, value: str) -> bytes:
    """One header field, without touching the dynamic table."""
    index = _STATIC_FIELDS.get((name, value))
    if index is not None:
        return _integer(index, 7, 0x80)  # indexed header field
    name_index = _STATIC_NAMES.get(name)
    if name_index is not None:  # literal without indexing, indexed name
        return _integer(name_index, 4, 0x00) + _string(value)
    return b"\x00" + _string(name) + _string(value)  # literal without indexing, new name


def encode_fields(headers: Sequence[tuple[str, str]]) -> bytes:
    """Fields encoded once, to be sent in many blocks (``HeaderEncoder.encode``'s
    ``encoded``): the encoding of a field never depends on the blocks before it."""
    return b"".join(encode_field(name, value) for name, value in headers)


class HeaderEncoder:
    """Encodes request header blocks for one connection."""

    __slots__ = ("_fields", "_first")

    def __init__(self) -> None:
        self._fields: dict[tuple[str, str], bytes] = {}
        self._first = True

    def encode(self, headers: Sequence[tuple[str, str]], encoded: bytes = b"") -> bytes:
        """The header block of ``encoded`` (fields from :func:`encode_fields`), then
        ``headers`` (names must be lower-case)."""
        fields = self._fields
        parts = [_SIZE_UPDATE_TO_ZERO, encoded] if self._first else [encoded]
        self._first = False
        for field in headers:
            known = fields.get(field)
            if known is None:
                known = encode_field(*field)
                if len(fields) >= _MAX_CACHED:
                    fields.clear()  # varying values (timeouts): keep the cache bounded
                fields[field] = known
            parts.append(known)
        return b"".join(parts)


class HeaderDecoder:
    """Decodes the peer's header blocks for one connection (HPACK state is per connection)."""

    __slots__ = ("_cache", "_decoder")

    def __init__(self) -> None:
        self._decoder = hpack.Decoder()
        #: Blocks of indexed fields only, decoded while the dynamic table was as it is now.
        self._cache: dict[bytes, Headers] = {}

    def decode(self, block: bytes) -> Headers:
        """The fields of ``block``; ``hpack.HPACKError`` if it is malformed."""
        cache = self._cache
        known = cache.get(block)
        if known is not None:
            return known
        headers = tuple((str(name), str(value)) for name, value in self._decoder.decode(block))
        if changes_table(block):
            cache.clear()  # earlier decodings may no longer hold
        elif len(cache) < _MAX_CACHED:
            cache[block] = headers
        return headers


def _read_integer(block: bytes, pos: int, prefix_bits: int) -> tuple[int, int]:
    """An HPACK integer at ``pos``: (value, position after it)."""
    limit = (1 << prefix_bits) - 1
    value = block[pos] & limit
    pos += 1
    if value < limit:
        return value, pos
    shift = 0
    while True:
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _skip_string(block: bytes, pos: int) -> int:
    length, pos = _read_integer(block, pos, 7)
    return pos + length


def changes_table(block: bytes) -> bool:
    """True when decoding ``block`` adds to or resizes the dynamic table (call it on blocks
    that decoded without error)."""
    pos, size = 0, len(block)
    while pos < size:
        first = block[pos]
        if first & 0x80:  # indexed field
            _, pos = _read_integer(block, pos, 7)
        elif first & 0xE0 != 0x00:  # literal with incremental indexing, or table size update
            return True
        else:  # literal without indexing / never indexed: name (index or string), value
            index, pos = _read_integer(block, pos, 4)
            if index == 0:
                pos = _skip_string(block, pos)
            pos = _skip_string(block, pos)
    return False
