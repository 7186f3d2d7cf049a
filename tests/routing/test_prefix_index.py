"""Properties of the bounded prefix index behind cache_aware."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from turnout.plugins.policies._prefix_index import PrefixIndex

prompts = st.lists(st.integers(0, 50), min_size=0, max_size=80)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(prompts, st.integers(0, 5)), max_size=40), prompts, st.integers(0, 63))
def test_match_is_a_true_prefix_of_some_insert(inserts, probe, allowed) -> None:
    index = PrefixIndex(block_size=4, max_tokens=10_000)  # never evicts here
    for tokens, tenant in inserts:
        index.insert(index.keys_for_tokens(tokens), 1 << tenant)
    depth, tenants = index.match(index.keys_for_tokens(probe), allowed)
    assert tenants & ~allowed == 0
    if depth == 0:
        assert tenants == 0
        return
    n = depth * 4
    holders = {t for tokens, t in inserts if tuple(tokens[:n]) == tuple(probe[:n])}
    # Every tenant reported holds that exact prefix, and every allowed holder is reported.
    assert {t for t in range(6) if tenants >> t & 1} == {t for t in holders if allowed >> t & 1}


@settings(max_examples=100, deadline=None)
@given(st.lists(prompts, min_size=1, max_size=60), st.integers(8, 64))
def test_size_stays_bounded_and_latest_survives(all_prompts, max_tokens) -> None:
    index = PrefixIndex(block_size=4, max_tokens=max_tokens)
    longest = 0
    for tokens in all_prompts:
        keys = index.keys_for_tokens(tokens)
        longest = max(longest, len(keys))
        index.insert(keys, 1)
        # A generation may overshoot by at most one prompt before it is rotated out.
        assert len(index) <= index.max_entries + 2 * longest
    last = index.keys_for_tokens(all_prompts[-1])
    if len(last) <= index.max_entries // 2:
        assert index.match(last, 1)[0] == len(last)


def test_text_blocks() -> None:
    index = PrefixIndex(block_size=2)
    keys = index.keys_for_text("abcdefgh" * 3)  # 8-char blocks
    assert len(keys) == 3
    index.insert(keys, 2)
    assert index.match(index.keys_for_text("abcdefgh" * 2 + "zzzzzzzz"), -1) == (2, 2)
