"""``turnout.tool_calls.json_stream``: incremental JSON scanning with safe releases."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from turnout.tool_calls.json_stream import DONE, ERROR, RUNNING, JsonScanner

from .harness import PROPERTY_SETTINGS, chunk_sizes, json_values, split


def scan(text: str, sizes: list[int] | tuple[int, ...] = (1,)) -> tuple[int, str, str, int]:
    """Feed ``text`` in chunks; return status, released text, closing, stop index."""
    scanner = JsonScanner()
    buf = ""
    released: list[str] = []
    stop = 0
    for chunk in split(text, sizes):
        buf += chunk
        stop = scanner.feed(buf, len(buf) - len(chunk))
        released.append(scanner.take())
        if scanner.status != RUNNING:
            return scanner.status, "".join(released), scanner.closing(), stop
    stop = scanner.feed(buf, len(buf), eof=True)
    released.append(scanner.take())
    return scanner.status, "".join(released), scanner.closing(), stop


@pytest.mark.parametrize(
    ("text", "released", "closing"),
    [
        ('{"a": 1', '{"a": 1', "}"),
        ('{"a": "hel', '{"a": "hel', '"}'),
        ('{"a": tru', "{", "}"),
        ('{"a": 1,', '{"a": 1', "}"),
        ('[1, [2, "x\\u00', '[1, [2, "x', '"]]'),
    ],
)
def test_broken_values_release_only_closable_prefixes(
    text: str, released: str, closing: str
) -> None:
    status, got, close, _ = scan(text)
    assert status == ERROR
    assert (got, close) == (released, closing)
    json.loads(got + close)


@pytest.mark.parametrize(
    ("text", "stop"), [('{"a":1}x', 7), ("12 ", 2), ('"s"', 3), ("  []", 4), ("true", 4)]
)
def test_complete_values_stop_right_after_the_value(text: str, stop: int) -> None:
    status, got, _, end = scan(text, (100,))
    assert status == DONE
    assert end == stop
    assert got == text[:stop].strip()


@pytest.mark.parametrize("text", ['{"a" 1}', "[1,]", "01", "-", '{"k": 1.}', "{'a': 1}", "nul "])
def test_invalid_json_is_an_error(text: str) -> None:
    assert scan(text)[0] == ERROR


def test_raw_control_characters_in_strings_are_escaped() -> None:
    status, got, _, _ = scan('{"a": "x\ny\t"}')
    assert status == DONE
    assert got == '{"a": "x\\ny\\t"}'
    assert json.loads(got) == {"a": "x\ny\t"}


@PROPERTY_SETTINGS
@given(value=json_values(), sizes=chunk_sizes(), compact=st.booleans(), cut=st.floats(0, 1))
def test_any_chunking_releases_the_verbatim_text(
    value: object, sizes: list[int], compact: bool, cut: float
) -> None:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":") if compact else None)
    status, got, _, _ = scan(text, sizes)
    assert status == DONE
    assert got == text
    # Any prefix: what was released plus the closing is valid JSON (never taken back).
    prefix = text[: int(len(text) * cut)] if text[:1] in "[{" else ""
    if prefix:
        status, got, close, _ = scan(prefix, sizes)
        if got:
            json.loads(got + close)
        assert text.startswith(got)


class CharScanner(JsonScanner):
    """The scanner without its shortcut for values complete at once: the character scan only."""

    def _whole(self, text: str, i: int) -> int:
        return -1


class CountingScanner(JsonScanner):
    """Counts the character scan's releases of safe text."""

    cleaned = 0

    def _clean(self, close: str) -> None:
        CountingScanner.cleaned += 1
        super()._clean(close)


def scan_with(scanner: JsonScanner, text: str, eof: bool) -> tuple[int, str, str, int]:
    stop = scanner.feed(text, 0, eof)
    return scanner.status, scanner.take(), scanner.closing(), stop


JSONISH = st.text(
    alphabet=st.sampled_from(list(' \t\n{}[]",:0123456789-+.eEtrufalsnNIiy\\/\x01\x1fxé😀')),
    max_size=40,
)


@PROPERTY_SETTINGS
@given(text=st.one_of(JSONISH, json_values().map(json.dumps)), eof=st.booleans())
@example(text='{"a": "x\ny"}', eof=False)
@example(text="[NaN, -Infinity]", eof=True)
@example(text='  "\\u00e9" x', eof=False)
@example(text="[" * 5000 + "]" * 5000, eof=False)
def test_a_value_taken_at_once_scans_like_the_characters(text: str, eof: bool) -> None:
    """A value complete in the first piece is checked by the C decoder: same status, text,
    closing and end as the character scan, whatever the text (broken, NaN, raw controls)."""
    assert scan_with(JsonScanner(), text, eof) == scan_with(CharScanner(), text, eof)


def test_a_complete_value_is_not_scanned_character_by_character() -> None:
    text = json.dumps({"city": "San Francisco", "filters": {"open": True, "max": [1, 2.5]}})
    CountingScanner.cleaned = 0
    assert scan_with(CountingScanner(), text + " tail", eof=False) == (DONE, text, "", len(text))
    assert CountingScanner.cleaned == 0
