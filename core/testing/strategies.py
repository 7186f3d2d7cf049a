"""hypothesis strategies for parser tests: chunkings, texts around a format's markers, tool calls.

Needs hypothesis, an optional dependency: ``pip install 'turnout[testing]'``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError(
        "turnout.testing.strategies and chunking_property need hypothesis, an optional "
        "dependency: pip install 'turnout[testing]'"
    ) from exc

__all__ = [
    "Call",
    "arguments",
    "calls",
    "chunk_sizes",
    "json_values",
    "marker_text",
    "names",
    "noisy_text",
    "plain_text",
]

#: A tool call as tests write it: the function name and its arguments object.
Call = tuple[str, dict[str, Any]]


def chunk_sizes(max_size: int = 9) -> st.SearchStrategy[list[int]]:
    """Chunkings for :func:`turnout.testing.split`: short cycles of chunk sizes (1 = one
    character at a time)."""
    return st.lists(st.integers(1, max_size), min_size=1, max_size=5)


def marker_text(markers: Iterable[str], max_parts: int = 10) -> st.SearchStrategy[str]:
    """Text assembled from a format's markers, every prefix and suffix of them (the places a
    chunk boundary or a false start hurts), a little noise and arbitrary text."""
    whole = sorted({m for m in markers if m})
    if not whole:
        raise ValueError("marker_text needs at least one non-empty marker")
    pieces = sorted(
        {m[:k] for m in whole for k in range(1, len(m))}
        | {m[k:] for m in whole for k in range(1, len(m))}
    )
    noise = st.text(alphabet="ab <>/|[]{}\"\n\t:'é", max_size=6)
    options = [st.sampled_from(whole), noise, st.text(max_size=4)]
    if pieces:
        options.insert(1, st.sampled_from(pieces))
    return st.lists(st.one_of(*options), max_size=max_parts).map("".join)


_NAME_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"


def names() -> st.SearchStrategy[str]:
    """Function names: an identifier, sometimes with ``-`` or ``.`` inside (MCP-style)."""
    ident = st.text(_NAME_ALPHABET, min_size=1, max_size=16).filter(lambda s: not s[0].isdigit())
    return st.one_of(
        ident,
        st.builds(lambda a, sep, b: f"{a}{sep}{b}", ident, st.sampled_from("-."), ident),
    )


#: Lone surrogates cannot be encoded (no model writes them).
_NO_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
_KEY = st.text(
    st.characters(codec="utf-8", exclude_categories=_NO_SURROGATES), min_size=1, max_size=8
)
_STRING = st.text(
    st.one_of(
        st.sampled_from(list('abc xyz"\\/\n\t{}[]<>|:,;')),
        st.characters(codec="utf-8", exclude_categories=_NO_SURROGATES),
    ),
    max_size=24,
)


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Arbitrary JSON values (unicode, escapes, nesting, numbers that survive a round trip)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**12), 10**12),
        st.floats(allow_nan=False, allow_infinity=False, width=32),
        _STRING,
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(_KEY, inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def arguments() -> st.SearchStrategy[dict[str, Any]]:
    """A JSON object of arguments (possibly empty)."""
    return st.dictionaries(_KEY, json_values(), max_size=5)


def calls(min_size: int = 1, max_size: int = 3) -> st.SearchStrategy[list[Call]]:
    """A list of ``(name, arguments)`` calls, to render in a format and parse back."""
    return st.lists(st.tuples(names(), arguments()), min_size=min_size, max_size=max_size)


def plain_text(
    avoid: Iterable[str] = (), alphabet: str | None = None, max_size: int = 30
) -> st.SearchStrategy[str]:
    """Prose around calls: letters, spaces, newlines, punctuation, unicode; never contains any
    string in ``avoid`` (a format's markers, or characters that start a bare call)."""
    bad = tuple(avoid)
    chars = alphabet or "abc XYZ 019\n\t.,:!?'-_()é中🙂"
    return st.text(chars, max_size=max_size).filter(lambda s: not any(b in s for b in bad))


def noisy_text(fragments: Iterable[str], max_size: int = 12) -> st.SearchStrategy[str]:
    """Arbitrary input built from a format's marker fragments, JSON-ish pieces and random text."""
    pieces = [*fragments, "{", "}", "[", "]", '"', ":", ",", "\\", "\n", " ", '{"name": "f"', "}}"]
    return st.lists(st.one_of(st.sampled_from(pieces), st.text(max_size=4)), max_size=max_size).map(
        "".join
    )
