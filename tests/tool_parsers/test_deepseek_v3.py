"""DeepSeek V3 tool calls (fenced JSON)."""

from __future__ import annotations

from .harness import Call, assert_stream_matches_complete, check_rendered, dumps, tools_for

P = "deepseek_v3"
TOOLS = tools_for(["get_weather", "search"])
B, E = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CB, CE, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def render(calls: list[Call]) -> str:
    """DeepSeek V3's own rendering."""
    body = "\n".join(f"{CB}function{SEP}{n}\n```json\n{dumps(a)}\n```{CE}" for n, a in calls)
    return f"{B}{body}{E}"


def test_single_and_parallel() -> None:
    check_rendered(P, render, [("search", {"q": "x"})], before="Let me.\n", tools=TOOLS)
    calls: list[Call] = [("search", {"q": "```"}), ("get_weather", {"city": "東京"})]
    check_rendered(P, render, calls, after=" ok", tools=TOOLS)


def test_end_tokens_never_leak() -> None:
    text = render([("search", {"q": 1})])
    for sizes in [(1,), (2,), (5,)]:
        result = assert_stream_matches_complete(P, text, TOOLS, sizes)
        assert result.normal_text == ""
        assert "｜" not in result.calls[0].arguments


def test_unknown_and_malformed() -> None:
    result = assert_stream_matches_complete(P, render([("other", {})]), TOOLS)
    assert result.calls == []
    assert "other" in result.normal_text
    text = f"{B}{CB}function{SEP}search\nno fence{CE}{E}"
    result = assert_stream_matches_complete(P, text, TOOLS)
    assert (result.calls, result.normal_text) == ([], text)
