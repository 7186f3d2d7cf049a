"""HPACK codec of the native transport, checked against the ``hpack`` package's own codec."""

from __future__ import annotations

import hpack
from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.wire.header_codec import (
    HeaderDecoder,
    HeaderEncoder,
    changes_table,
    encode_field,
    encode_fields,
)

names = st.sampled_from(
    [":method", ":scheme", ":path", ":authority", "content-type", "user-agent", "te", "x-é"]
)
values = st.sampled_from(["POST", "GET", "http", "https", "/", "trailers", "application/grpc"]) | (
    st.text(min_size=0, max_size=300)
)
fields = st.tuples(names, values)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(fields, max_size=8), min_size=1, max_size=6))
def test_blocks_decode_to_what_was_encoded(blocks: list[list[tuple[str, str]]]) -> None:
    encoder, decoder = HeaderEncoder(), hpack.Decoder()
    for headers in blocks:
        assert [(str(k), str(v)) for k, v in decoder.decode(encoder.encode(headers))] == headers
    assert decoder.header_table_size == 0  # we never make the peer keep a table for us


def test_fields_use_the_static_table() -> None:
    assert encode_field(":method", "POST") == b"\x83"
    assert encode_field(":scheme", "http") == b"\x86"
    assert encode_field(":path", "/x") == b"\x04\x02/x"
    # content-type is static entry 31: a 4-bit prefix overflows into a second byte.
    assert encode_field("content-type", "a") == b"\x0f\x10\x01a"
    long = "v" * 200  # a 7-bit string length overflows too
    assert encode_field("x", long) == b"\x00\x01x\x7f\x49" + long.encode()


# Few names and values: the same blocks recur, before and after the table changed under them.
response_fields = st.tuples(
    st.sampled_from([":status", "grpc-status", "x-n"]),
    st.sampled_from(["200", "0", "14", "a" * 30]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(response_fields, min_size=1, max_size=2), min_size=1, max_size=40))
def test_cached_decoding_matches_plain_decoding(blocks: list[list[tuple[str, str]]]) -> None:
    """However a server's encoder indexes and evicts (small table), the cache never answers
    with a stale decoding."""
    server = hpack.Encoder()
    server.header_table_size = 96  # tiny: entries are evicted often
    plain, ours = hpack.Decoder(), HeaderDecoder()
    for headers in blocks:
        block = server.encode(headers)
        expected = tuple((str(k), str(v)) for k, v in plain.decode(block))
        assert ours.decode(block) == expected


def test_repeated_indexed_blocks_are_not_decoded_again() -> None:
    server = hpack.Encoder()
    headers = [(":status", "200"), ("content-type", "application/grpc")]
    decoder = HeaderDecoder()
    first = server.encode(headers)  # adds content-type to the table
    assert decoder.decode(first) == tuple(headers)
    again = server.encode(headers)  # now every field is indexed
    assert min(again) >= 0x80
    assert decoder.decode(again) is decoder.decode(again)  # served from the cache


def test_a_table_change_invalidates_cached_blocks() -> None:
    server, decoder = hpack.Encoder(), HeaderDecoder()
    seen = [decoder.decode(server.encode([("x-n", v)])) for v in ("a", "a", "b", "b")]
    # The 2nd and 4th blocks are the same byte (the newest table entry), meaning "a" then "b".
    assert seen == [(("x-n", "a"),), (("x-n", "a"),), (("x-n", "b"),), (("x-n", "b"),)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(response_fields, min_size=1, max_size=3), st.booleans(), st.booleans()),
        min_size=1,
        max_size=20,
    )
)
def test_changes_table_reports_every_block_that_moves_the_table(
    steps: list[tuple[list[tuple[str, str]], bool, bool]],
) -> None:
    server, plain = hpack.Encoder(), hpack.Decoder()
    for headers, sensitive, resize in steps:
        if resize:
            server.header_table_size = 64 if server.header_table_size != 64 else 4096
        fields = [hpack.NeverIndexedHeaderTuple(*f) if sensitive else f for f in headers]
        block = server.encode(fields)
        before = list(plain.header_table.dynamic_entries), plain.header_table_size
        plain.decode(block)
        after = list(plain.header_table.dynamic_entries), plain.header_table_size
        if before != after:  # it may err on the safe side, never the other
            assert changes_table(block)


def test_literals_without_indexing_keep_blocks_cacheable() -> None:
    # grpcio's OK trailers: an indexed grpc-status and a literal, never indexed grpc-message.
    trailers = bytes.fromhex("be000c677270632d6d65737361676500")
    assert not changes_table(trailers)
    assert changes_table(bytes.fromhex("400b677270632d7374617475730130"))  # adds grpc-status
    assert changes_table(b"\x20")  # table size update


def test_fields_encoded_once_go_first_in_every_block() -> None:
    fixed = [(":method", "POST"), (":path", "/svc/Generate"), ("te", "trailers")]
    encoder, decoder = HeaderEncoder(), HeaderDecoder()
    encoded = encode_fields(fixed)
    for timeout in ("5m", "7m"):
        block = encoder.encode([("grpc-timeout", timeout)], encoded)
        assert decoder.decode(block) == (*fixed, ("grpc-timeout", timeout))
