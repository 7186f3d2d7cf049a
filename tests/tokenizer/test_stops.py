"""Stop strings: streaming in any chunks gives the one-shot result; stop-token visibility."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from turnout.tokenizer.stops import (
    REGEX_HOLD_CHARS,
    StopStringMatcher,
    apply_stops,
    compile_stop_regexes,
    find_stop,
    ids_to_show,
    stop_token_visible,
)

# A small alphabet makes stop strings (and their partial prefixes) occur often.
alphabet = st.sampled_from(["a", "b", "c", "é", "😀", " ", "\n"])
small_texts = st.lists(alphabet, max_size=60).map("".join)
stop_sets = st.lists(
    st.lists(alphabet, min_size=1, max_size=5).map("".join), min_size=1, max_size=4
)


def run_stream(
    matcher: StopStringMatcher, text: str, cuts: list[int]
) -> tuple[str, str | None, list[str]]:
    bounds = sorted({0, len(text), *(cut % (len(text) + 1) for cut in cuts)})
    released: list[str] = []
    matched = None
    for a, b in itertools.pairwise(bounds):
        out, hit = matcher.push(text[a:b])
        released.append(out)
        if hit is not None:
            matched = hit
            break
    if matched is None:
        released.append(matcher.finish())
    return "".join(released), matched, released


def one_shot_reference(text: str, stops: list[str], keep: bool) -> tuple[str, str | None]:
    """Scan like an engine: after each character, does the output end with a stop string?"""
    for end in range(1, len(text) + 1):
        ending = [stop for stop in stops if text[:end].endswith(stop)]
        if ending:
            stop = max(ending, key=len)
            return text[: end if keep else end - len(stop)], stop
    return text, None


@settings(max_examples=200, deadline=None)
@given(
    text=small_texts,
    stops=stop_sets,
    cuts=st.lists(st.integers(0, 80), max_size=15),
    keep=st.booleans(),
)
def test_streaming_equals_one_shot(
    text: str, stops: list[str], cuts: list[int], keep: bool
) -> None:
    expected = one_shot_reference(text, stops, keep)
    assert apply_stops(text, stops, keep) == expected
    released, matched, _ = run_stream(StopStringMatcher(stops, keep_matched=keep), text, cuts)
    assert (released, matched) == expected


@settings(max_examples=150, deadline=None)
@given(text=small_texts, stops=stop_sets)
def test_holds_back_only_what_could_still_match(text: str, stops: list[str]) -> None:
    """Character by character, everything is released except a suffix that starts a stop."""
    matcher = StopStringMatcher(stops)
    shown = ""
    for index, char in enumerate(text):
        out, hit = matcher.push(char)
        shown += out
        if hit is not None:
            return
        seen = text[: index + 1]
        held = seen[len(shown) :]
        assert seen.startswith(shown)
        assert all(not any(stop.startswith(seen[i:]) for stop in stops) for i in range(len(shown)))
        assert held == "" or any(stop.startswith(held) and stop != held for stop in stops)


REGEXES = [
    "b+c",
    "a[bc]a",
    "😀\\s",
    "c{2}",
    "é.b",
    "(ab|ba)c",
    " \\n?a",
    # Assertions: what precedes a match (possibly released already), what follows it.
    "a(?=bc)",
    "(?<=ab)c",
    "(?<!a)bb",
    "^b",
    "\\bc",
    "ca(?!a)",
    "c$",
    "a\\b",
]


def regex_reference(
    text: str, stops: list[str], patterns: list[str], keep: bool
) -> tuple[str, str | None]:
    """After each character: does the output so far end with a stop string or hold a match?"""
    compiled = compile_stop_regexes(patterns)
    for end in range(1, len(text) + 1):
        seen = text[:end]
        hits = [(end - len(s), end, s) for s in stops if seen.endswith(s)]
        hits += [(m.start(), m.end(), p.pattern) for p in compiled if (m := p.search(seen))]
        if hits:
            start, stop_end, stop = min(hits, key=lambda hit: hit[:2])  # a string first on ties
            return seen[: stop_end if keep else start], stop
    return text, None


@settings(max_examples=200, deadline=None)
@given(
    text=small_texts,
    stops=st.lists(st.lists(alphabet, min_size=1, max_size=4).map("".join), max_size=2),
    patterns=st.lists(st.sampled_from(REGEXES), min_size=1, max_size=3, unique=True),
    cuts=st.lists(st.integers(0, 80), max_size=15),
    keep=st.booleans(),
)
# A partial match begun in the held text and continued by the next chunk must stay held.
@example(text="aba", stops=[], patterns=["a[bc]a"], cuts=[1, 2], keep=False)
@example(text="xéab", stops=[], patterns=["é.b"], cuts=[2, 3], keep=True)
# A string and a regex completed at the same place, same start: the string is reported.
@example(text="abc", stops=["bc"], patterns=["b+c"], cuts=[], keep=False)
# A lookahead completes where its lookahead is satisfied, whatever the chunks: "ba" first.
@example(text="xfoobar", stops=["ba"], patterns=["foo(?=bar)"], cuts=[], keep=False)
@example(text="cabc", stops=["ab"], patterns=["a(?=bc)"], cuts=[], keep=True)
@example(text="cabca", stops=[], patterns=["a(?=bc)"], cuts=[], keep=False)
# What precedes a match was released already: a lookbehind, ^ and \\b still see it.
@example(text="abc", stops=[], patterns=["(?<=ab)c"], cuts=[1, 2], keep=False)
@example(text="ab", stops=[], patterns=["^b"], cuts=[1], keep=False)
@example(text="ac", stops=[], patterns=["\\bc"], cuts=[1], keep=False)
# Whether a prefix holds a match can change as text follows: every prefix counts.
@example(text="cab", stops=[], patterns=["c$"], cuts=[], keep=False)
@example(text="caab", stops=[], patterns=["ca(?!a)"], cuts=[], keep=True)
def test_stop_regexes_stream_like_one_shot(
    text: str, stops: list[str], patterns: list[str], cuts: list[int], keep: bool
) -> None:
    matcher = StopStringMatcher(stops, keep_matched=keep, patterns=compile_stop_regexes(patterns))
    released, matched, _ = run_stream(matcher, text, cuts)
    assert (released, matched) == regex_reference(text, stops, patterns, keep)


def test_stop_regex_holds_a_partial_match_and_reports_the_pattern() -> None:
    matcher = StopStringMatcher([], patterns=compile_stop_regexes([r"Answer: \d"]))
    assert matcher.push("So. Answ") == ("So. ", None)
    assert matcher.push("er: x") == ("Answer: x", None)
    assert matcher.push(" Answer: 42 more") == (" ", r"Answer: \d")
    assert matcher.overshoot == len("2 more")


def test_a_lookahead_completes_where_it_is_satisfied_whatever_the_chunks() -> None:
    """``foo(?=bar)`` on "xfoobar" with the stop "ba": "ba" is completed first (at "xfooba"),
    in one chunk as character by character; alone, the regex's overshoot counts from the end
    of its lookahead (the text needed to know it matched), not from the end of its match."""
    for chunks in (["xfoobar"], list("xfoobar"), ["xfoob", "ar"]):
        matcher = StopStringMatcher(["ba"], patterns=compile_stop_regexes(["foo(?=bar)"]))
        released = ""
        for chunk in chunks:
            out, hit = matcher.push(chunk)
            released += out
            if hit is not None:
                break
        assert (released, matcher.matched) == ("xfoo", "ba"), chunks
    matcher = StopStringMatcher([], patterns=compile_stop_regexes(["foo(?=bar)"]))
    assert matcher.push("xfoob") == ("x", None)
    assert matcher.push("ar and more") == ("", "foo(?=bar)")
    assert matcher.overshoot == len(" and more")


def test_stop_regex_hold_is_bounded() -> None:
    matcher = StopStringMatcher([], patterns=compile_stop_regexes([r"<<.*>>"]))
    released, hit = matcher.push("<<" + "x" * 1000)
    assert hit is None
    assert len(released) == 1002 - REGEX_HOLD_CHARS


@pytest.mark.parametrize("bad", ["(", "a*", "x?"])
def test_bad_stop_regex_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="stop regex"):
        compile_stop_regexes([bad])


def test_matched_stop_trimmed_and_reported() -> None:
    matcher = StopStringMatcher(["</answer>", "STOP"])
    assert matcher.push("The answer is 4</ans") == ("The answer is 4", None)
    assert matcher.push("wer> and more") == ("", "</answer>")
    assert matcher.done
    assert matcher.matched == "</answer>"
    assert matcher.push("ignored") == ("", None)
    assert matcher.finish() == ""


def test_keep_matched_includes_the_stop() -> None:
    matcher = StopStringMatcher(["\n\n"], keep_matched=True)
    assert matcher.push("line\n") == ("line", None)
    assert matcher.push("\nnext") == ("\n\n", "\n\n")


def test_false_start_is_released_and_finish_flushes() -> None:
    matcher = StopStringMatcher(["abc"])
    assert matcher.push("xab") == ("x", None)
    assert matcher.push("d") == ("abd", None)
    assert matcher.push("ab") == ("", None)
    assert matcher.finish() == "ab"


def test_first_completed_stop_wins() -> None:
    # "bc" completes before "abcd" does, as an engine checking after every token would see.
    assert find_stop("abcd", ["abcd", "bc"]) == (1, 3, "bc")
    assert apply_stops("xxabcd", ["abcd", "bc"], keep_matched=False) == ("xxa", "bc")
    # Same end: the longer (earlier starting) stop wins.
    assert apply_stops("xabc", ["bc", "abc"], keep_matched=False) == ("x", "abc")


def test_no_stops_passes_everything_through() -> None:
    matcher = StopStringMatcher([])
    assert matcher.push("anything") == ("anything", None)
    assert matcher.finish() == ""


@pytest.mark.parametrize("bad", ["", None, 5])
def test_invalid_stop_is_a_clear_error(bad: object) -> None:
    with pytest.raises(ValueError, match="non-empty strings"):
        StopStringMatcher(["ok", bad])  # type: ignore[list-item]


def test_linear_time_on_long_outputs() -> None:
    """Long stops and a long output in tiny chunks: no rescans of the whole output."""
    stops = ["z" * 200 + "!", "y" * 150]
    matcher = StopStringMatcher(stops)
    chunk = "z" * 199 + "y" * 149 + "q"
    start = time.perf_counter()
    total = 0
    for _ in range(300):
        for i in range(0, len(chunk), 7):
            out, hit = matcher.push(chunk[i : i + 7])
            total += len(out)
            assert hit is None
    elapsed = time.perf_counter() - start
    assert total + len(matcher.finish()) == 300 * len(chunk)
    assert elapsed < 2.0


def test_stop_token_visibility() -> None:
    specials = {2}
    kwargs = {"special_token_ids": specials}
    assert not stop_token_visible(2, no_stop_trim=False, skip_special_tokens=False, **kwargs)
    assert not stop_token_visible(2, no_stop_trim=True, skip_special_tokens=True, **kwargs)
    assert stop_token_visible(2, no_stop_trim=True, skip_special_tokens=False, **kwargs)
    assert stop_token_visible(7, no_stop_trim=True, skip_special_tokens=True, **kwargs)


def test_ids_to_show_trims_only_a_hidden_final_stop_token() -> None:
    specials = {2}
    assert ids_to_show(
        [5, 6, 2], 2, no_stop_trim=False, skip_special_tokens=True, special_token_ids=specials
    ) == [5, 6]
    assert ids_to_show(
        [5, 6, 9], 9, no_stop_trim=False, skip_special_tokens=False, special_token_ids=specials
    ) == [5, 6]
    assert ids_to_show(
        [5, 6, 9], 9, no_stop_trim=True, skip_special_tokens=True, special_token_ids=specials
    ) == [5, 6, 9]
    assert ids_to_show(
        [5, 6], None, no_stop_trim=False, skip_special_tokens=True, special_token_ids=specials
    ) == [5, 6]
    assert ids_to_show(
        [5, 6], 2, no_stop_trim=False, skip_special_tokens=True, special_token_ids=specials
    ) == [5, 6]
